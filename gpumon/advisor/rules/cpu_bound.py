"""cpu_bound: the GPU idles while the training thread runs the job's own code."""

from __future__ import annotations

from gpumon.advisor.categories import (
    CPU_BOUND,
)
from gpumon.advisor.rules.common import (
    MIN_SEVERITY,
    PYSPY_CONFIDENCE,
    Candidate,
    gpu_part,
    join_parts,
    nvml_idle,
    pct,
    rounded,
    step_model_confidence,
)
from gpumon.advisor.signals import SOURCE_PYSPY, Signals
from gpumon.jobs.pyspy.categories import USER_CODE as USER_CODE_SAMPLES

CPU_BOUND_SHARE = MIN_SEVERITY
"""GPU idle this share of the time (or more) while the training thread runs its own code makes the job CPU-bound:
the share is what moving that code off the training thread's path gives at most."""


def rule_cpu_bound(signals: Signals) -> Candidate | None:
    """cpu_bound, from the step model: the GPU idles while the training thread runs the job's own code (its line
    from the stack sampler), not torch's dispatch, the DataLoader, copies or syncs."""
    if signals.source == SOURCE_PYSPY:
        return _pyspy_cpu_bound(signals)
    share = signals.step_model.step_shares.get("cpu")
    if share is None or share < CPU_BOUND_SHARE or not signals.has_gpu:
        return None
    lines = [
        (where, line_share)
        for where, line_share, kind in zip(
            signals.step_model.idle_lines,
            signals.step_model.idle_line_shares,
            signals.step_model.idle_line_activities,
            strict=False,
        )
        if kind == "cpu"
    ]
    at = f", most at {lines[0][0]} ({pct(lines[0][1])})" if lines else ""
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time while the training thread runs its own code{at}",
        f"GPU busy {pct(signals.step_model.step_shares.get('gpu_busy'))}",
        gpu_part(signals),
    )
    numbers = {
        "cpu_share": rounded(share),
        "gpu_busy": rounded(signals.step_model.step_shares.get("gpu_busy")),
        "lines": [{"where": where, "share": rounded(line_share)} for where, line_share in lines[:3]],
        "busy_from": signals.step_model.step_busy_from,
    }
    return Candidate(CPU_BOUND, share, step_model_confidence(signals), evidence, numbers)


def _pyspy_cpu_bound(signals: Signals) -> Candidate | None:
    """cpu_bound without the hook: the main thread's samples in the job's own code, bounded by the GPU's idle time
    (GPU-Util). py-spy without --native cannot tell a sync inside C++ (`if loss < best:`) from the line's own CPU
    work, but such a wait keeps the GPU busy: only the idle part can be the code's."""
    share, idle = signals.pyspy.shares.get(USER_CODE_SAMPLES), nvml_idle(signals)
    if share is None or idle is None or not signals.has_gpu:
        return None
    severity = min(share, idle)
    if severity < CPU_BOUND_SHARE:
        return None
    at = f", most at {signals.pyspy.user_line}" if signals.pyspy.user_line else ""
    evidence = join_parts(
        f"main thread in the job's own code in {pct(share)} of py-spy samples{at}",
        f"GPU idle {pct(idle)} of the time",
        None if signals.pyspy.native else "without --native a sync inside C++ reads as the line that calls it",
    )
    numbers = {"pyspy_user_code": rounded(share), "gpu_idle": rounded(idle), "line": signals.pyspy.user_line}
    return Candidate(CPU_BOUND, severity, 0.7 * PYSPY_CONFIDENCE, evidence, numbers)
