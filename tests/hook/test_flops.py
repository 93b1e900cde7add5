"""FLOPs of a sampled step: a real hooked CPU job reports what FlopCounterMode counts; the sampler's refusals."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import pytest
import torch
from hook_helpers import get_state
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from torch.utils.flop_counter import FlopCounterMode

from gpumon import protocol
from gpumon.hook.flops import FIRST_STEP, FlopSampler
from gpumon.jobs.connection import HookConnection

BATCH = 8


def _train_step_flops() -> int:
    """FlopCounterMode's count of one step of tests/hook/jobs/train.py's model (optimizer mode), counted here."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(BATCH, 16), torch.randint(0, 2, (BATCH,))
    with FlopCounterMode(display=False) as counter:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return int(counter.get_total_flops())


def test_a_hooked_job_reports_the_flops_of_its_sampled_step(start_job: Any) -> None:
    job = start_job("--mode", "optimizer", "--steps", str(FIRST_STEP + 10), "--item-sleep-ms", "0")
    with HookConnection(job.wait_socket()) as conn:
        job.event("done")
        flops = get_state(conn)["flops"]
    assert job.release() == 0, job.stderr()
    counted_here = _train_step_flops()
    # Forward 2*m*n*k per Linear; backward the weight grads of both and the input grad of the second only.
    analytic = 2 * BATCH * (16 * 32 + 32 * 2) + 2 * BATCH * (16 * 32 + 2 * 32 * 2)
    assert counted_here == analytic
    assert flops["available"] is True and flops["reason"] is None
    assert (flops["flops_per_step"], flops["seq"], flops["samples"]) == (counted_here, FIRST_STEP, BATCH)


def test_counting_off_by_environment(start_job: Any) -> None:
    env = {**os.environ, protocol.FLOPS_ENV: "0"}
    job = start_job("--mode", "optimizer", "--steps", str(FIRST_STEP + 5), "--item-sleep-ms", "0", env=env)
    with HookConnection(job.wait_socket()) as conn:
        job.event("done")
        assert get_state(conn)["flops"] is None
    assert job.release() == 0, job.stderr()


def _step(model: torch.nn.Module, sampler: FlopSampler, seq: int) -> None:
    model(torch.randn(4, 8)).sum().backward()
    sampler.boundary(seq, 4)


def test_counts_exactly_the_sampled_step_and_leaves_the_mode() -> None:
    errors: list[BaseException] = []
    sampler = FlopSampler(torch, errors.append, every=3, recount_gap_s=0.0)
    model = torch.nn.Linear(8, 8)
    for seq in range(1, FIRST_STEP + 5):
        _step(model, sampler, seq)
        assert sampler.counting == (seq + 1 in (FIRST_STEP, FIRST_STEP + 3))
    assert _get_current_dispatch_mode() is None
    result = sampler.result
    assert result is not None and result["available"]
    # forward 2*4*8*8; backward: weight grad only (the input needs no grad)
    assert (result["flops_per_step"], result["seq"], result["samples"]) == (2 * (2 * 4 * 8 * 8), FIRST_STEP + 3, 4)
    assert errors == []


class _OtherMode(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_another_dispatch_mode_at_the_boundary_is_not_disturbed() -> None:
    sampler = FlopSampler(torch, lambda exc: None, every=1)
    with _OtherMode() as other:
        sampler.boundary(FIRST_STEP - 1, 1)
        assert not sampler.counting and _get_current_dispatch_mode() is other
    assert sampler.result is not None and not sampler.result["available"]
    assert "TorchDispatchMode is active" in str(sampler.result["reason"])


def test_a_mode_the_job_pushes_during_the_counted_step_is_not_popped() -> None:
    sampler = FlopSampler(torch, lambda exc: None, every=1000)
    model = torch.nn.Linear(8, 8)
    sampler.boundary(FIRST_STEP - 1, 4)
    assert sampler.counting
    other = _OtherMode()
    other.__enter__()
    _step(model, sampler, FIRST_STEP)
    assert _get_current_dispatch_mode() is other  # ours waits beneath it
    other.__exit__(None, None, None)
    _step(model, sampler, FIRST_STEP + 1)
    assert _get_current_dispatch_mode() is None and not sampler.counting
    assert sampler.result is not None and not sampler.result["available"]


def test_compiled_code_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(counters={"stats": {"unique_graphs": 2}})
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", fake)
    sampler = FlopSampler(torch, lambda exc: None, every=1)
    sampler.boundary(FIRST_STEP - 1, 1)
    assert not sampler.counting
    assert sampler.result is not None and "torch.compile" in str(sampler.result["reason"])


def test_a_failing_count_is_abandoned_and_never_raised() -> None:
    errors: list[BaseException] = []
    sampler = FlopSampler(torch, errors.append, every=1)
    sampler.boundary(FIRST_STEP - 1, 1)
    assert sampler.counting

    def broken() -> int:
        raise RuntimeError("boom")

    sampler._counter.get_total_flops = broken
    sampler.boundary(FIRST_STEP, 1)
    assert _get_current_dispatch_mode() is None and not sampler.counting
    assert [str(e) for e in errors] == ["boom"]
    assert sampler.result is not None and "boom" in str(sampler.result["reason"])


def test_a_child_forked_inside_the_counted_step_leaves_the_mode() -> None:
    """A DataLoader worker forked during the counted step inherits the mode; the hook's after-fork handler stops it."""
    sampler = FlopSampler(torch, lambda exc: None, every=1000)
    sampler.boundary(FIRST_STEP - 1, 4)
    assert sampler.counting
    pid = os.fork()
    if pid == 0:
        inherited = _get_current_dispatch_mode() is not None
        sampler.stop()
        os._exit(0 if inherited and _get_current_dispatch_mode() is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sampler.counting  # the parent's count goes on
    sampler.stop()
    assert _get_current_dispatch_mode() is None


def test_the_convolution_share_of_the_count() -> None:
    """The hook reports the FLOPs of convolutions apart (their peak can differ): here exactly what the counter
    attributes to aten.convolution and its backward, and the Linear's FLOPs stay out of it."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
    x = torch.randn(2, 3, 8, 8)
    sampler = FlopSampler(torch, on_error=lambda exc: None, every=1)
    sampler.boundary(FIRST_STEP - 1, 2)  # opens the count for the next step
    model(x).sum().backward()
    sampler.boundary(FIRST_STEP, 2)
    result = sampler.result
    assert result is not None and result["available"]
    with FlopCounterMode(display=False) as reference:
        model(x).sum().backward()
    conv = sum(flops for op, flops in reference.get_flop_counts()["Global"].items() if "convolution" in str(op))
    assert result["conv_flops_per_step"] == conv > 0
    assert result["flops_per_step"] == reference.get_total_flops() > conv


def test_recounts_wait_for_the_gap_as_well_as_the_steps() -> None:
    """One in `every` steps, but never sooner than the recount gap after the last count: a counted step runs ~12x
    slower, so a launch-bound loop must not pay for one every few seconds."""
    now = [0.0]
    sampler = FlopSampler(torch, lambda exc: None, every=5, recount_gap_s=600.0, clock=lambda: now[0])
    assert sampler.due(FIRST_STEP) and not sampler.due(FIRST_STEP - 1)
    model = torch.nn.Linear(8, 8)
    for seq in range(1, FIRST_STEP + 1):
        _step(model, sampler, seq)  # counts step FIRST_STEP at t=0
    assert sampler.result is not None and sampler.result["seq"] == FIRST_STEP
    now[0] = 599.0
    assert not sampler.due(FIRST_STEP + 5) and not sampler.due(FIRST_STEP + 6)
    now[0] = 600.0
    assert sampler.due(FIRST_STEP + 10) and not sampler.due(FIRST_STEP + 11)
