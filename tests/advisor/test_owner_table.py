"""The one table from the step model's owners to categories: with an optimizer offloaded to the host, the copies up to
its parameters' bytes are its own (cpu_optimizer), and copies beyond those the job's transfers (transfer_bound)."""

from __future__ import annotations

import pytest

from gpumon.advisor.categories import CPU_BOUND, CPU_OPTIMIZER, TRANSFER_BOUND
from gpumon.advisor.rules.owners import category_shares
from gpumon.advisor.signals import Signals

MB = 1e6


def shares(**budget: object) -> dict[str, float]:
    signals = Signals.of(step_shares={"gpu_busy": 0.2, "d2h": 0.4, "h2d": 0.1, "cpu": 0.3}, **budget)
    return category_shares(signals, bar=0.1)


def test_copies_beyond_the_optimizer_s_bytes_are_the_job_s_transfers() -> None:
    # 100 MB of parameters on the host: its gradients down and weights up; the job copies 60 MB more down itself.
    split = shares(
        optimizer_on_cpu=True, optimizer_host_bytes=100 * MB, d2h_bytes_per_step=160 * MB, h2d_bytes_per_step=100 * MB
    )
    assert split[CPU_OPTIMIZER] == pytest.approx(0.4 * 100 / 160 + 0.1)
    assert split[TRANSFER_BOUND] == pytest.approx(0.4 * 60 / 160)
    assert split[CPU_BOUND] == pytest.approx(0.3)


def test_without_the_bytes_every_copy_is_the_optimizer_s_and_without_it_none() -> None:
    assert shares(optimizer_on_cpu=True)[CPU_OPTIMIZER] == pytest.approx(0.5)
    assert TRANSFER_BOUND not in shares(optimizer_on_cpu=True)
    on_gpu = shares(optimizer_on_cpu=False, optimizer_host_bytes=0.0, d2h_bytes_per_step=160 * MB)
    assert CPU_OPTIMIZER not in on_gpu and on_gpu[TRANSFER_BOUND] == pytest.approx(0.5)
