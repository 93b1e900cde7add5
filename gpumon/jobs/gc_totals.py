"""Python's garbage collector from the hook's state: its cumulative totals, one point a second, and its rates over a
window (what the step records' budgets give too, but known where no budgeted step or no step record arrives)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpumon.jobs.numbers import clean_number

MIN_SPAN_S = 1.0
"""Two points at least this far apart make a rate."""


@dataclass(frozen=True, slots=True)
class GcPoint:
    """The collector's totals at unix time `t`."""

    t: float
    ms: float
    idle_ms: float
    passes: int
    gen2: int

    @classmethod
    def from_state(cls, gc: object, t: float) -> GcPoint | None:
        """The state's `gc` at its time; None where it is missing or not numbers."""
        if not isinstance(gc, Mapping):
            return None
        ms, passes = clean_number(gc.get("ms_total")), clean_number(gc.get("passes_total"))
        if ms is None or passes is None:
            return None
        idle = clean_number(gc.get("idle_ms_total"))
        gen2 = clean_number(gc.get("gen2_total"))
        return cls(t, ms, idle or 0.0, int(passes), int(gen2 or 0))


@dataclass(frozen=True, slots=True)
class GcRates:
    """The collector over a window: its share of the wall time (and the part with the training stream idle), its
    passes a second, full ones a second, and ms a pass."""

    share: float
    idle_share: float
    passes_per_s: float
    gen2_per_s: float
    ms_per_pass: float | None


def gc_rates(points: Sequence[GcPoint], start: float | None, end: float | None) -> GcRates | None:
    """The rates between the first and last point within [start, end]; None with fewer than two points
    MIN_SPAN_S apart, or totals that went back (the hook restarted)."""
    inside = [p for p in points if (start is None or p.t >= start) and (end is None or p.t <= end)]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    span = last.t - first.t
    passes = last.passes - first.passes
    if span < MIN_SPAN_S or passes < 0 or last.ms < first.ms:
        return None
    ms = last.ms - first.ms
    return GcRates(
        share=min(1.0, ms / 1e3 / span),
        idle_share=min(1.0, max(0.0, last.idle_ms - first.idle_ms) / 1e3 / span),
        passes_per_s=passes / span,
        gen2_per_s=max(0, last.gen2 - first.gen2) / span,
        ms_per_pass=ms / passes if passes > 0 else None,
    )
