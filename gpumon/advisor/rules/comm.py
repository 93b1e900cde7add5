"""comm_bound: NCCL time not hidden behind compute, from a profiler capture, the hook's live timing, or py-spy."""

from __future__ import annotations

from gpumon import units
from gpumon.advisor.categories import (
    COMM_BOUND,
)
from gpumon.advisor.rules.common import (
    PYSPY_CONFIDENCE,
    Candidate,
    gpu_part,
    join_parts,
    pct,
    rounded,
)
from gpumon.advisor.signals import SOURCE_PYSPY, Signals
from gpumon.jobs.pyspy.categories import COMM as COMM_SAMPLES

COMM_EXPOSED_SHARE = 0.15
"""Exposed NCCL time (no compute kernel beside it) at or above this share of the captured step time makes the job
comm-bound: the same bar as MIN_SEVERITY, since the share is what the job would gain with full overlap."""
COMM_CONFIDENCE = 0.85
"""Measured from the job's own kernel timeline, so high; not 1: the capture covers only a few steps."""


def rule_comm(signals: Signals) -> Candidate | None:
    """comm_bound, from a profiler capture (NCCL kernel time with no compute kernel beside it, per step), else from
    the collectives the hook timed live (the training stream's wait in them)."""
    if signals.source == SOURCE_PYSPY:
        return _pyspy_comm(signals)
    exposed = signals.comm.comm_exposed_ms_per_step
    # The profiler's own host work stretches the captured steps, not NCCL's kernels: the exposed time is a share of
    # the step as the hook timed it live, where it did.
    step_ms = signals.step.step_ms or signals.comm.capture_step_ms
    if exposed is None or not step_ms:
        return _live_comm(signals)
    share = min(1.0, exposed / step_ms)
    if share < COMM_EXPOSED_SHARE:
        return None
    captured_ms = signals.comm.capture_step_ms
    stretched = (
        f" (each {units.milliseconds(captured_ms)} under the profiler)" if captured_ms not in (None, step_ms) else ""
    )
    evidence = join_parts(
        f"NCCL exposed {units.milliseconds(exposed)} of each {units.milliseconds(step_ms)} step ({pct(share)})",
        f"{pct(signals.comm.comm_overlap_share)} of the NCCL time ({units.milliseconds(signals.comm.comm_ms_per_step)} "
        "a step) overlaps compute",
        f"profiler capture of {signals.comm.capture_steps} steps{stretched}" if signals.comm.capture_steps else None,
    )
    numbers = {
        "comm_exposed_share": rounded(share),
        "comm_exposed_ms_per_step": rounded(exposed),
        "comm_ms_per_step": rounded(signals.comm.comm_ms_per_step),
        "comm_overlap_share": rounded(signals.comm.comm_overlap_share),
        "step_ms": rounded(step_ms),
        "capture_steps": signals.comm.capture_steps,
    }
    return Candidate(COMM_BOUND, share, COMM_CONFIDENCE, evidence, numbers)


LIVE_COMM_CONFIDENCE = 0.75
"""Timed by events around the job's own torch.distributed calls on GPU-timed steps: measured, but blind to DDP's
all-reduces inside backward (a capture sees those)."""


def _live_comm(signals: Signals) -> Candidate | None:
    share = signals.comm.comm_live_share
    if share is None or share < COMM_EXPOSED_SHARE:
        return None
    per_step = signals.comm.comm_live_ms_per_step
    evidence = join_parts(
        f"the training stream waits in torch.distributed collectives {pct(share)} of each step"
        + (f" ({units.milliseconds(per_step)} a step)" if per_step is not None else ""),
        "nothing overlaps them: each blocks the stream until NCCL is done",
        f"timed live on {signals.comm.comm_live_steps} steps" if signals.comm.comm_live_steps else None,
    )
    numbers = {
        "comm_live_share": rounded(share),
        "comm_live_ms_per_step": rounded(per_step),
        "comm_live_steps": signals.comm.comm_live_steps,
        "step_ms": rounded(signals.step.step_ms),
    }
    return Candidate(COMM_BOUND, share, LIVE_COMM_CONFIDENCE, evidence, numbers)


PYSPY_COMM_CONFIDENCE = 0.6 * PYSPY_CONFIDENCE
"""The host's time in collectives, read from py-spy samples: a collective the training thread waits in holds the
step; how much of NCCL's time the GPU overlaps with compute, py-spy cannot see."""


def _pyspy_comm(signals: Signals) -> Candidate | None:
    """comm_bound without the hook: the training thread's samples inside torch.distributed calls (a blocking
    collective, or a launch queue full behind one). DDP's all-reduces run in C++ threads py-spy does not sample."""
    share = signals.pyspy.shares.get(COMM_SAMPLES)
    if share is None or share < COMM_EXPOSED_SHARE:
        return None
    evidence = join_parts(
        f"main thread inside torch.distributed calls in {pct(share)} of py-spy samples",
        "py-spy cannot see how much of NCCL's time overlaps compute: `gpumon run` times the collectives on the GPU",
        gpu_part(signals),
    )
    return Candidate(COMM_BOUND, share, PYSPY_COMM_CONFIDENCE, evidence, {"pyspy_comm": rounded(share)})
