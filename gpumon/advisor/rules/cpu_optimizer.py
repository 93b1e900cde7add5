"""cpu_optimizer: the optimizer's parameters (and its state) live on the CPU, so every step copies gradients down,
updates on the CPU and copies weights up, while the GPU waits."""

from __future__ import annotations

from dataclasses import replace

from gpumon import units
from gpumon.advisor.categories import CPU_OPTIMIZER
from gpumon.advisor.rules.common import (
    Candidate,
    join_parts,
    nvml_idle,
    pct,
    pct100,
    rounded,
    step_model_confidence,
)
from gpumon.advisor.signals import Signals


def cpu_optimizer_evidence(signals: Signals, share: float) -> Candidate:
    """The share of the step the CPU-side optimizer costs, with its own time and the copies it needs."""
    seen_by_pyspy = not signals.budget.optimizer_on_cpu and signals.pyspy.shares.get("optimizer")
    evidence = join_parts(
        f"the optimizer computes on the CPU: the training thread is in torch.optim in "
        f"{pct(signals.pyspy.shares.get('optimizer'))} of py-spy samples while the main process runs at "
        f"{pct100(signals.host.main_cpu)} CPU (torch's CPU threads), and the GPU idles {pct(share)} of the time"
        if seen_by_pyspy
        else f"the optimizer's parameters live on the CPU: the GPU idles {pct(share)} of the time while it runs there "
        "and its gradients are copied down",
        f"optimizer.step() takes {pct(signals.budget.optimizer_share)} of the step"
        if signals.budget.optimizer_share
        else None,
        f"{units.size(signals.budget.d2h_bytes_per_step)} copied device->host a step"
        if signals.budget.d2h_bytes_per_step
        else None,
        f"{units.size(signals.budget.h2d_bytes_per_step)} host->device" if signals.budget.h2d_bytes_per_step else None,
    )
    numbers = {
        "cpu_optimizer_idle": rounded(share),
        "optimizer_share": rounded(signals.budget.optimizer_share),
        "d2h_bytes_per_step": rounded(signals.budget.d2h_bytes_per_step, 0),
        "h2d_bytes_per_step": rounded(signals.budget.h2d_bytes_per_step, 0),
    }
    return Candidate(CPU_OPTIMIZER, share, step_model_confidence(signals), evidence, numbers)


MODEL_FREE_CONFIDENCE = 0.85
"""The hook saw the optimizer's parameters on the CPU: that mechanism is certain (its gradients copied down are the
syncs a step the host_sync rule counts, at 0.8), and its share is bounded by the idle."""


def rule_cpu_optimizer(signals: Signals) -> Candidate | None:
    """cpu_optimizer without a step model (too few samples: a step of hundreds of ms): the optimizer's parameters on
    the CPU while the GPU idles; its share is the budget's optimizer and copy time where measured, else the idle."""
    idle = nvml_idle(signals)
    if not signals.budget.optimizer_on_cpu or idle is None:
        return None
    parts = [signals.budget.optimizer_share, signals.budget.d2h_share, signals.budget.h2d_share]
    measured = sum(part for part in parts if part is not None) if any(part is not None for part in parts) else None
    share = min(idle, measured) if measured else idle
    return replace(cpu_optimizer_evidence(signals, share), confidence=MODEL_FREE_CONFIDENCE)
