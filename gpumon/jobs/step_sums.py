"""Per-second running sums of a job's steps, so a diagnosis covers its whole window at any step rate.

A view keeps only the last few hundred step records; at hundreds of steps per second they span a second or two.
These sums (one small record per second, an hour of them) let the advisor add up steps, wall time, data wait,
GPU time and samples over any window in that hour, the budgeted steps' device->host copies and optimizer time, and
difference the job's cumulative garbage-collector and allocator figures between the window's first and last
budgeted steps.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gpumon.jobs.budget import CumulativeMark, CumulativeRates, StepTimeBudget

SUM_SECONDS = 3600
"""Seconds of sums kept (an hour)."""


@dataclass(frozen=True, slots=True)
class StepSums:
    """Sums over the steps that ended in one second; `first_t`/`last_t` are the earliest and latest step ends."""

    second: int
    """The second (floor of unix time) the steps ended in."""
    first_t: float
    last_t: float
    first_start: float
    """When the earliest of these steps began (its end minus its wall time)."""
    steps: int = 0
    wall_ms: float = 0.0
    data_ms: float = 0.0
    timed_steps: int = 0
    """Steps with GPU timing (CUDA events); the two sums below cover only those."""
    timed_wall_ms: float = 0.0
    gpu_busy_ms: float = 0.0
    sampled_steps: int = 0
    """Steps that said how many samples they took."""
    samples: int = 0
    budget_steps: int = 0
    """Budgeted steps; the sums below cover only those."""
    budget_wall_ms: float = 0.0
    d2h_ms: float = 0.0
    d2h_bytes: int = 0
    optimizer_ms: float = 0.0
    first_mark: CumulativeMark | None = None
    """The earliest and latest budgeted steps' cumulative figures in this second."""
    last_mark: CumulativeMark | None = None

    def share_in(self, start: float | None, end: float | None) -> float:
        """The share of these steps that ended within [start, end] (steps taken as evenly spread in time)."""
        low = self.first_t if start is None else max(start, self.first_t)
        high = self.last_t if end is None else min(end, self.last_t)
        if high < low:
            return 0.0
        if self.last_t <= self.first_t:
            return 1.0
        return (high - low) / (self.last_t - self.first_t)


@dataclass(frozen=True, slots=True)
class WindowSums:
    """Step sums over a window: counts are prorated where the window cuts a second, hence floats."""

    steps: float = 0.0
    wall_ms: float = 0.0
    data_ms: float = 0.0
    timed_steps: float = 0.0
    timed_wall_ms: float = 0.0
    gpu_busy_ms: float = 0.0
    sampled_steps: float = 0.0
    samples: float = 0.0
    budget_steps: float = 0.0
    budget_wall_ms: float = 0.0
    d2h_ms: float = 0.0
    d2h_bytes: float = 0.0
    optimizer_ms: float = 0.0
    first_mark: CumulativeMark | None = None
    """The window's earliest and latest budgeted steps with cumulative figures."""
    last_mark: CumulativeMark | None = None
    first_start: float | None = None
    """When the window's earliest step began."""
    last_t: float | None = None
    """When its latest step ended."""

    @property
    def span_s(self) -> float:
        """Seconds from the first step's start to the last step's end."""
        if self.first_start is None or self.last_t is None:
            return 0.0
        return max(0.0, self.last_t - self.first_start)

    @property
    def d2h_share(self) -> float | None:
        """Device->host copies' share of the budgeted steps' wall time; None without budgeted steps."""
        return min(1.0, self.d2h_ms / self.budget_wall_ms) if self.budget_wall_ms > 0 else None

    @property
    def d2h_bytes_per_step(self) -> float | None:
        """Device-to-host bytes a budgeted step copied, on average (None: none budgeted)."""
        return self.d2h_bytes / self.budget_steps if self.budget_steps > 0 else None

    @property
    def optimizer_share(self) -> float | None:
        """optimizer.step()'s share of the budgeted steps' wall time."""
        return min(1.0, self.optimizer_ms / self.budget_wall_ms) if self.budget_wall_ms > 0 else None

    @property
    def rates(self) -> CumulativeRates:
        """The garbage collector's and the allocator's figures between the window's first and last budgeted steps."""
        return CumulativeRates.between(self.first_mark, self.last_mark)


_SUMMED = (
    "steps",
    "wall_ms",
    "data_ms",
    "timed_steps",
    "timed_wall_ms",
    "gpu_busy_ms",
    "sampled_steps",
    "samples",
    "budget_steps",
    "budget_wall_ms",
    "d2h_ms",
    "d2h_bytes",
    "optimizer_ms",
)
"""The sums a window prorates where it cuts a second."""


def window_sums(seconds: Iterable[StepSums], start: float | None, end: float | None) -> WindowSums:
    """Add up the steps that ended within [start, end] (open bounds take every second kept)."""
    totals = dict.fromkeys(_SUMMED, 0.0)
    first_start: float | None = None
    last_t: float | None = None
    first_mark: CumulativeMark | None = None
    last_mark: CumulativeMark | None = None
    for sums in seconds:
        share = sums.share_in(start, end)
        if share <= 0.0:
            continue
        for name in totals:
            totals[name] += share * getattr(sums, name)
        for mark in (sums.first_mark, sums.last_mark):
            if mark is None or (start is not None and mark.t < start) or (end is not None and mark.t > end):
                continue
            if first_mark is None or mark.seq < first_mark.seq:
                first_mark = mark
            if last_mark is None or mark.seq > last_mark.seq:
                last_mark = mark
        begin = sums.first_start
        if start is not None and sums.first_t < start:  # the window cuts this second: its first step ends at start
            begin = start - sums.wall_ms / sums.steps / 1e3
        first_start = begin if first_start is None else min(first_start, begin)
        finish = sums.last_t if end is None else min(end, sums.last_t)
        last_t = finish if last_t is None else max(last_t, finish)
    return WindowSums(**totals, first_mark=first_mark, last_mark=last_mark, first_start=first_start, last_t=last_t)


class StepSumsLog:
    """Accumulates steps into per-second sums; bounded to SUM_SECONDS seconds. Not thread-safe (JobState locks)."""

    def __init__(self, seconds: int = SUM_SECONDS) -> None:
        self._closed: deque[StepSums] = deque(maxlen=seconds - 1)  # and the open one
        self._open: StepSums | None = None

    def add(
        self,
        t: float,
        wall_ms: float,
        data_ms: float,
        gpu_busy_ms: float | None,
        samples: int | None,
        budget: StepTimeBudget | None = None,
    ) -> None:
        """One step that ended at unix time `t` (with its budget, on budgeted steps); a step older than the open
        second counts in it (a late record)."""
        if not all(math.isfinite(value) for value in (t, wall_ms, data_ms)) or wall_ms < 0 or data_ms < 0:
            return
        second = math.floor(t)
        current = self._open
        if current is None or second > current.second:
            if current is not None:
                self._closed.append(current)
            current = StepSums(second=second, first_t=t, last_t=t, first_start=t - wall_ms / 1e3)
        timed = gpu_busy_ms is not None
        first_mark, last_mark = current.first_mark, current.last_mark
        mark = budget.mark if budget is not None else None
        if mark is not None:
            first_mark = mark if first_mark is None or mark.seq < first_mark.seq else first_mark
            last_mark = mark if last_mark is None or mark.seq > last_mark.seq else last_mark
        self._open = StepSums(
            second=current.second,
            first_t=min(current.first_t, t),
            last_t=max(current.last_t, t),
            first_start=min(current.first_start, t - wall_ms / 1e3),
            steps=current.steps + 1,
            wall_ms=current.wall_ms + wall_ms,
            data_ms=current.data_ms + data_ms,
            timed_steps=current.timed_steps + timed,
            timed_wall_ms=current.timed_wall_ms + (wall_ms if timed else 0.0),
            gpu_busy_ms=current.gpu_busy_ms + (gpu_busy_ms or 0.0),
            sampled_steps=current.sampled_steps + (samples is not None),
            samples=current.samples + (samples or 0),
            budget_steps=current.budget_steps + (budget is not None),
            budget_wall_ms=current.budget_wall_ms + (budget.host_ms if budget is not None else 0.0),
            d2h_ms=current.d2h_ms + (budget.d2h_ms if budget is not None else 0.0),
            d2h_bytes=current.d2h_bytes + (budget.d2h_bytes if budget is not None else 0),
            optimizer_ms=current.optimizer_ms + (budget.optimizer_ms if budget is not None else 0.0),
            first_mark=first_mark,
            last_mark=last_mark,
        )

    def seconds(self) -> tuple[StepSums, ...]:
        """Every second kept, oldest first, the one still filling last."""
        return (*self._closed, self._open) if self._open is not None else tuple(self._closed)
