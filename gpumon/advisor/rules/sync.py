"""host_sync: the host waits for the GPU inside the step (.item(), .cpu(), printing a tensor), and the GPU idles
after each wait until new work arrives."""

from __future__ import annotations

from gpumon.advisor.categories import (
    HOST_SYNC,
)
from gpumon.advisor.rules.common import (
    MIN_SEVERITY,
    PYSPY_CONFIDENCE,
    SOURCE_LINE_CONFIDENCE,
    Candidate,
    gpu_part,
    join_parts,
    nvml_idle,
    pct,
    rounded,
    step_model_confidence,
)
from gpumon.advisor.signals import SOURCE_PYSPY, Signals
from gpumon.jobs.pyspy.categories import SYNC_NATIVE, SYNC_SOURCE
from gpumon.jobs.step_model import sync_cost

SYNCS_PER_STEP = 1.0
MANY_SYNCS = 3.0
PYSPY_SYNC_SHARE = 0.15
UNEXPLAINED_IDLE = 0.15


def rule_host_sync(signals: Signals) -> Candidate | None:
    if not signals.has_gpu:
        return None
    idle = nvml_idle(signals)
    data = signals.step.data_share or 0.0
    if signals.source == SOURCE_PYSPY:
        waiting = signals.pyspy.shares.get("cuda_sync")
        if waiting is None or waiting < PYSPY_SYNC_SHARE:
            return None
        # The syncs' cost is the GPU idle they cause, not the host's wait in them: what the step would lose without
        # them, max(host time outside syncs, GPU busy) (jobs.step_model), where GPU-Util says how busy the GPU is.
        share = waiting if signals.gpu.gpu_util is None else sync_cost(waiting, signals.gpu.gpu_util / 100.0)
        evidence_counts = signals.pyspy.sync_evidence
        seen = sum(evidence_counts.values())
        from_source = evidence_counts.get(SYNC_SOURCE, 0)
        how = None
        confidence = 0.6 * PYSPY_CONFIDENCE
        if seen and evidence_counts.get(SYNC_NATIVE, 0) >= seen / 2:
            how = "seen in CUDA's own wait functions (py-spy --native)"
            confidence = 0.75 * PYSPY_CONFIDENCE
        elif seen and from_source >= seen / 2:
            how = "read from the source line (.item(), .cpu()...): C++ frames are not sampled"
            confidence = SOURCE_LINE_CONFIDENCE * PYSPY_CONFIDENCE
        evidence = join_parts(
            f"main thread in a CUDA sync in {pct(waiting)} of py-spy samples",
            f"the GPU idles {pct(share)} of the time because of them" if signals.gpu.gpu_util is not None else None,
            how,
            gpu_part(signals),
        )
        return Candidate(
            HOST_SYNC,
            share,
            confidence,
            evidence,
            {
                "pyspy_cuda_sync": rounded(waiting),
                "sync_cost": rounded(share),
                "gpu_util": rounded(signals.gpu.gpu_util),
                "sync_evidence": dict(evidence_counts),
            },
        )
    if signals.step_model.step_shares:
        return _step_model_sync(signals)
    syncs = signals.step.syncs_per_step
    if syncs is None and signals.budget.budget_syncs_per_step:
        syncs = signals.budget.budget_syncs_per_step
    if syncs is None or syncs < SYNCS_PER_STEP or idle is None:
        return None
    unexplained = max(0.0, idle - data - (signals.budget.h2d_share or 0.0))
    if unexplained < UNEXPLAINED_IDLE:
        return None
    severity = unexplained * (1.0 if syncs >= MANY_SYNCS else 0.6)
    site = f" (most at {signals.step.sync_sites[0]})" if signals.step.sync_sites else ""
    wait = None
    if signals.budget.sync_wait_share is not None:
        wait = f"the host waits in them {pct(signals.budget.sync_wait_share)} of each step"
    evidence = join_parts(
        f"{syncs:.0f} host-device sync{'s' if round(syncs) != 1 else ''} per step{site}",
        wait,
        f"GPU idle {pct(idle)} of the time",
        gpu_part(signals),
    )
    numbers = {
        "syncs_per_step": rounded(syncs),
        "gpu_idle": rounded(idle),
        "data_share": rounded(data),
        "sync_sites": list(signals.step.sync_sites[:3]),
    }
    return Candidate(HOST_SYNC, severity, 0.8 if syncs >= MANY_SYNCS else 0.6, evidence, numbers)


def _step_model_sync(signals: Signals) -> Candidate | None:
    """host_sync from the step model: the GPU idle that syncs cause (drained at each sync, waiting until the host
    launches again) and the idle while the host waits in one; what removing the syncs would give back."""
    after, inside = (
        signals.step_model.step_shares.get("sync_idle", 0.0),
        signals.step_model.step_shares.get("sync_wait", 0.0),
    )
    share = after + inside
    if share < MIN_SEVERITY:
        return None
    syncs = (
        signals.step.syncs_per_step if signals.step.syncs_per_step is not None else signals.budget.budget_syncs_per_step
    )
    sync_lines = [
        where
        for where, kind in zip(signals.step_model.idle_lines, signals.step_model.idle_line_activities, strict=False)
        if kind == "sync"
    ] or list(signals.step.sync_sites[:1])
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time because of host syncs ({pct(after)} after them until new work "
        "arrives" + (f", {pct(inside)} inside them" if inside >= 0.01 else "") + ")",
        f"{syncs:.0f} sync{'s' if round(syncs) != 1 else ''} per step" if syncs else None,
        f"at {sync_lines[0]}" if sync_lines else None,
        f"the host waits in them {pct(signals.budget.sync_wait_share)} of each step"
        if signals.budget.sync_wait_share is not None
        else None,
    )
    numbers = {
        "sync_idle": rounded(after),
        "sync_wait_idle": rounded(inside),
        "syncs_per_step": rounded(syncs),
        "sync_wait_share": rounded(signals.budget.sync_wait_share),
        "sync_sites": list(signals.step.sync_sites[:3]),
        "busy_from": signals.step_model.step_busy_from,
    }
    return Candidate(HOST_SYNC, share, step_model_confidence(signals), evidence, numbers)
