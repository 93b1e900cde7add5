"""The step time budget as the monitor reads it: one step's parts, their shares over some steps, and the rates of the
job's cumulative garbage-collector and allocator figures between two budgeted steps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.jobs.numbers import clean_number

PARTS = ("data_worker", "data_collate", "h2d", "d2h", "sync_wait", "rest")
"""The host's time in a step, in the order of the bar; they add up to the step's wall time."""


def _count(value: object) -> int | None:
    number = clean_number(value)
    return None if number is None else int(number)


@dataclass(frozen=True, slots=True)
class CumulativeMark:
    """The end of one budgeted step with the job's cumulative figures then (None: the hook did not send one)."""

    seq: int
    t: float
    gc_ms: float | None = None
    gc_idle_ms: float | None = None
    gc_passes: int | None = None
    gc_gen2: int | None = None
    gc_collected: int | None = None
    empty_cache_ms: float | None = None
    empty_cache_idle_ms: float | None = None
    empty_cache_calls: int | None = None
    device_allocs: int | None = None
    """The caching allocator's cudaMalloc calls; None without CUDA."""

    @classmethod
    def from_budget(cls, budget: Mapping[str, Any], seq: int, t: float) -> CumulativeMark | None:
        """From a `budget` object's `*_total` fields; None when it has none (an older hook)."""
        mark = cls(
            seq=seq,
            t=t,
            gc_ms=clean_number(budget.get("gc_ms_total")),
            gc_idle_ms=clean_number(budget.get("gc_idle_ms_total")),
            gc_passes=_count(budget.get("gc_passes_total")),
            gc_gen2=_count(budget.get("gc_gen2_total")),
            gc_collected=_count(budget.get("gc_collected_total")),
            empty_cache_ms=clean_number(budget.get("empty_cache_ms_total")),
            empty_cache_idle_ms=clean_number(budget.get("empty_cache_idle_ms_total")),
            empty_cache_calls=_count(budget.get("empty_cache_calls_total")),
            device_allocs=_count(budget.get("device_allocs_total")),
        )
        return None if mark.gc_ms is None and mark.empty_cache_calls is None and mark.device_allocs is None else mark


def _delta(first: float | None, last: float | None) -> float | None:
    """last - first of a cumulative figure; None when either is missing or it went back (a restarted hook)."""
    if first is None or last is None or last < first:
        return None
    return last - first


@dataclass(frozen=True, slots=True)
class CumulativeRates:
    """The job's garbage-collector and allocator figures between two budgeted steps (None: not measurable)."""

    gc_share: float | None = None
    """Time in Python's garbage collector over the wall time between the two."""
    gc_idle_share: float | None = None
    """Of it, passes begun with the training stream idle."""
    gc_passes_per_s: float | None = None
    gc_gen2_per_s: float | None = None
    """Full (generation 2) collections a second."""
    gc_ms_per_pass: float | None = None
    empty_cache_share: float | None = None
    """Time in torch.cuda.empty_cache() over the wall time between the two."""
    empty_cache_idle_share: float | None = None
    """Of it, the frees after the stream had drained."""
    empty_cache_per_step: float | None = None
    device_allocs_per_step: float | None = None
    """The caching allocator's cudaMalloc calls per step."""

    @classmethod
    def between(cls, first: CumulativeMark | None, last: CumulativeMark | None) -> CumulativeRates:
        """The rates of the cumulative figures between two budgeted steps (empty without both, or not in order)."""
        if first is None or last is None or last.seq <= first.seq or last.t <= first.t:
            return cls()
        wall_ms = (last.t - first.t) * 1e3
        steps = last.seq - first.seq
        gc_ms = _delta(first.gc_ms, last.gc_ms)
        passes = _delta(first.gc_passes, last.gc_passes)
        gen2 = _delta(first.gc_gen2, last.gc_gen2)
        cache_ms = _delta(first.empty_cache_ms, last.empty_cache_ms)
        gc_idle_ms = _delta(first.gc_idle_ms, last.gc_idle_ms)
        cache_idle_ms = _delta(first.empty_cache_idle_ms, last.empty_cache_idle_ms)
        cache_calls = _delta(first.empty_cache_calls, last.empty_cache_calls)
        allocs = _delta(first.device_allocs, last.device_allocs)
        return cls(
            gc_share=None if gc_ms is None else min(1.0, gc_ms / wall_ms),
            gc_idle_share=None if gc_idle_ms is None else min(1.0, gc_idle_ms / wall_ms),
            gc_passes_per_s=None if passes is None else passes / wall_ms * 1e3,
            gc_gen2_per_s=None if gen2 is None else gen2 / wall_ms * 1e3,
            gc_ms_per_pass=gc_ms / passes if gc_ms is not None and passes else None,
            empty_cache_share=None if cache_ms is None else min(1.0, cache_ms / wall_ms),
            empty_cache_idle_share=None if cache_idle_ms is None else min(1.0, cache_idle_ms / wall_ms),
            empty_cache_per_step=None if cache_calls is None else cache_calls / steps,
            device_allocs_per_step=None if allocs is None else allocs / steps,
        )


@dataclass(frozen=True, slots=True)
class StepTimeBudget:
    """One budgeted step (milliseconds; bytes for the copies)."""

    data_worker_ms: float = 0.0
    data_collate_ms: float = 0.0
    h2d_ms: float = 0.0
    h2d_bytes: int = 0
    h2d_pageable_bytes: int = 0
    h2d_wait_ms: float = 0.0
    """Of sync_wait_ms, blocking host->device copies that found GPU work queued (their wait and their copy)."""
    h2d_wait_bytes: int = 0
    """Of h2d_bytes, those copies' bytes (0 from an older hook, which left them out of h2d_bytes)."""
    d2h_ms: float = 0.0
    d2h_idle_ms: float = 0.0
    d2h_bytes: int = 0
    d2h_copies: int = 0
    sync_wait_ms: float = 0.0
    syncs: int = 0
    gpu_ms: float | None = None
    rest_ms: float = 0.0
    optimizer_ms: float = 0.0
    """Host time in optimizer.step(), beside the parts (it overlaps copies and syncs made inside it)."""
    empty_cache_ms: float = 0.0
    empty_cache_calls: int = 0
    mark: CumulativeMark | None = None
    """The job's cumulative figures at the end of this step; None from an older hook."""

    @classmethod
    def from_record(cls, budget: object, seq: int = 0, t: float = 0.0) -> StepTimeBudget | None:
        """From a step record's `budget` object (and the record's `seq` and `t`); None when it is absent or not an
        object."""
        if not isinstance(budget, Mapping):
            return None
        values: dict[str, Any] = {}
        for name in (
            "data_worker_ms",
            "data_collate_ms",
            "h2d_ms",
            "h2d_wait_ms",
            "d2h_ms",
            "d2h_idle_ms",
            "sync_wait_ms",
            "rest_ms",
            "optimizer_ms",
            "empty_cache_ms",
        ):
            values[name] = clean_number(budget.get(name)) or 0.0
        for name in (
            "h2d_bytes",
            "h2d_pageable_bytes",
            "h2d_wait_bytes",
            "d2h_bytes",
            "d2h_copies",
            "syncs",
            "empty_cache_calls",
        ):
            values[name] = int(clean_number(budget.get(name)) or 0)
        values["gpu_ms"] = clean_number(budget.get("gpu_ms"))
        values["mark"] = CumulativeMark.from_budget(budget, seq, t)
        return cls(**values)

    @property
    def host_ms(self) -> float:
        """The step's host time: the sum of its parts (the data wait included)."""
        return self.data_worker_ms + self.data_collate_ms + self.h2d_ms + self.d2h_ms + self.sync_wait_ms + self.rest_ms


@dataclass(frozen=True, slots=True)
class BudgetShares:
    """Where the budgeted steps' time went, as shares of their wall time (the PARTS add up to 1); `gpu` is the
    GPU's busy share beside them (it works while the host does the rest), None where not measured. The garbage
    collector's and the allocator's rates come from the first and last budgeted steps' cumulative figures."""

    steps: int = 0
    step_ms: float | None = None
    """The budgeted steps' mean host time: set against the window's mean step, how typical they were (budgeted steps
    follow slow ones, and in a job paced by its workers the step after a long wait is a short one)."""
    data_worker: float = 0.0
    data_collate: float = 0.0
    h2d: float = 0.0
    h2d_wait: float = 0.0
    """Blocking host->device copies that found GPU work queued (inside sync_wait): a sync's wait, but a copy's."""
    d2h: float = 0.0
    """Device->host copies (.cpu(), .to("cpu")), their waits for the GPU included."""
    d2h_idle: float = 0.0
    """Of it, blocking copies' time after the stream had drained (the SMs idle)."""
    sync_wait: float = 0.0
    rest: float = 0.0
    gpu: float | None = None
    h2d_bytes_per_step: float = 0.0
    pageable: float | None = None
    """Share of the copied bytes from pageable host memory; None without copies."""
    h2d_rate: float | None = None
    """Bytes/s while copying (the copies that waited for queued work left out: their time is mostly the wait)."""
    syncs_per_step: float = 0.0
    d2h_bytes_per_step: float = 0.0
    optimizer_share: float = 0.0
    """Host time in optimizer.step() (beside the parts: it overlaps the copies and syncs made inside it)."""
    gc_share: float | None = None
    gc_passes_per_s: float | None = None
    gc_gen2_per_s: float | None = None
    gc_ms_per_pass: float | None = None
    empty_cache_share: float | None = None
    """From the cumulative figures; with a single budgeted step, its own calls' time over its wall time."""
    empty_cache_per_step: float | None = None
    device_allocs_per_step: float | None = None

    @property
    def data(self) -> float:
        """The data wait's share: the worker's wait and the collate."""
        return self.data_worker + self.data_collate

    @classmethod
    def of(cls, budgets: Iterable[StepTimeBudget]) -> BudgetShares:
        """The shares over `budgets`, each part's time over their wall time."""
        steps = list(budgets)
        total = sum(step.host_ms for step in steps)
        if not steps or total <= 0:
            return cls()
        timed = [step for step in steps if step.gpu_ms is not None]
        timed_total = sum(step.host_ms for step in timed)
        copied = sum(step.h2d_bytes for step in steps)
        copy_ms = sum(step.h2d_ms for step in steps)
        copied_apart = copied - sum(step.h2d_wait_bytes for step in steps)
        marks = sorted((step.mark for step in steps if step.mark is not None), key=lambda mark: mark.seq)
        rates = CumulativeRates.between(marks[0], marks[-1]) if marks else CumulativeRates()
        empty_cache_share = rates.empty_cache_share
        empty_cache_per_step = rates.empty_cache_per_step
        if empty_cache_per_step is None and marks:  # one budgeted step: its own calls
            empty_cache_share = min(1.0, sum(s.empty_cache_ms for s in steps) / total)
            empty_cache_per_step = sum(s.empty_cache_calls for s in steps) / len(steps)
        return cls(
            steps=len(steps),
            step_ms=total / len(steps),
            data_worker=sum(s.data_worker_ms for s in steps) / total,
            data_collate=sum(s.data_collate_ms for s in steps) / total,
            h2d=sum(s.h2d_ms for s in steps) / total,
            h2d_wait=sum(s.h2d_wait_ms for s in steps) / total,
            d2h=sum(s.d2h_ms for s in steps) / total,
            d2h_idle=sum(s.d2h_idle_ms for s in steps) / total,
            sync_wait=sum(s.sync_wait_ms for s in steps) / total,
            rest=sum(s.rest_ms for s in steps) / total,
            gpu=min(1.0, sum(s.gpu_ms or 0.0 for s in timed) / timed_total) if timed and timed_total > 0 else None,
            h2d_bytes_per_step=copied / len(steps),
            pageable=sum(s.h2d_pageable_bytes for s in steps) / copied if copied else None,
            h2d_rate=copied_apart / (copy_ms / 1e3) if copied_apart > 0 and copy_ms > 0 else None,
            syncs_per_step=sum(s.syncs for s in steps) / len(steps),
            d2h_bytes_per_step=sum(s.d2h_bytes for s in steps) / len(steps),
            optimizer_share=min(1.0, sum(s.optimizer_ms for s in steps) / total),
            gc_share=rates.gc_share,
            gc_passes_per_s=rates.gc_passes_per_s,
            gc_gen2_per_s=rates.gc_gen2_per_s,
            gc_ms_per_pass=rates.gc_ms_per_pass,
            empty_cache_share=empty_cache_share,
            empty_cache_per_step=empty_cache_per_step,
            device_allocs_per_step=rates.device_allocs_per_step,
        )

    def to_dict(self) -> dict[str, Any]:
        """The shares as JSON."""
        return {
            name: (round(value, 4) if isinstance(value, float) else value)
            for name, value in ((field, getattr(self, field)) for field in self.__slots__)
        }
