"""gc_bound: Python's garbage collector stops the training thread, and the GPU runs dry meanwhile."""

from __future__ import annotations

from dataclasses import replace

from gpumon import units
from gpumon.advisor.categories import GC_BOUND
from gpumon.advisor.rules.common import Candidate, join_parts, nvml_idle, pct, rounded, step_model_confidence
from gpumon.advisor.signals import Signals


def gc_evidence(signals: Signals, share: float) -> Candidate:
    """The collector's share of the step, with how often it runs and how long a pass takes."""
    passes, full = signals.budget.gc_passes_per_s, signals.budget.gc_gen2_per_s
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time while Python's garbage collector runs",
        f"collections take {pct(signals.budget.gc_share)} of the wall time"
        if signals.budget.gc_share is not None
        else None,
        f"{passes:.0f} passes a second ({full:.1f} full ones), {units.milliseconds(signals.budget.gc_ms_per_pass)} each"
        if passes is not None and full is not None
        else None,
        "a heap of long-lived objects (per-sample records kept for the run) makes each pass longer",
    )
    numbers = {
        "gc_idle": rounded(share),
        "gc_share": rounded(signals.budget.gc_share),
        "gc_idle_share": rounded(signals.budget.gc_idle_share),
        "gc_passes_per_s": rounded(passes),
        "gc_gen2_per_s": rounded(full),
        "gc_ms_per_pass": rounded(signals.budget.gc_ms_per_pass),
    }
    return Candidate(GC_BOUND, share, step_model_confidence(signals), evidence, numbers)


GC_MODEL_FREE_CONFIDENCE = 0.8
"""The collector's time is timed outright by its own callbacks: only its overlap with GPU work is inferred."""


def rule_gc_bound(signals: Signals) -> Candidate | None:
    """gc_bound without a step model: a collection holds the GIL, so the stack sampler cannot sample during it and a
    job that collects most of the time leaves it too few samples (held-out 1195: collections 74% of the wall at 3
    steps a second, no step model, named unexplained_idle). The hook's gc.callbacks time the passes outright; a pass
    stops the training thread, so the GPU idles through it but for the work queued before it: the share is the
    collections' time, at most GPU-Util's idle."""
    idle = nvml_idle(signals)
    collected = signals.budget.gc_share
    if idle is None or not collected:
        return None
    return replace(gc_evidence(signals, min(idle, collected)), confidence=GC_MODEL_FREE_CONFIDENCE)
