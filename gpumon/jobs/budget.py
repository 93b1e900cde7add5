"""The step time budget as the monitor reads it: one step's parts, and their shares over some steps."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PARTS = ("data_worker", "data_collate", "h2d", "sync_wait", "rest")
"""The host's time in a step, in the order of the bar; they add up to the step's wall time."""


def clean_number(value: object) -> float | None:
    """A finite number from a message, at least 0; None for anything else (a bool, a string, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


@dataclass(frozen=True, slots=True)
class StepTimeBudget:
    """One budgeted step (milliseconds; bytes for the copies)."""

    data_worker_ms: float = 0.0
    data_collate_ms: float = 0.0
    h2d_ms: float = 0.0
    h2d_bytes: int = 0
    h2d_pageable_bytes: int = 0
    sync_wait_ms: float = 0.0
    syncs: int = 0
    gpu_ms: float | None = None
    rest_ms: float = 0.0

    @classmethod
    def from_record(cls, budget: object) -> StepTimeBudget | None:
        """From a step record's `budget` object; None when it is absent or not an object."""
        if not isinstance(budget, Mapping):
            return None
        values: dict[str, Any] = {}
        for name in ("data_worker_ms", "data_collate_ms", "h2d_ms", "sync_wait_ms", "rest_ms"):
            values[name] = clean_number(budget.get(name)) or 0.0
        for name in ("h2d_bytes", "h2d_pageable_bytes", "syncs"):
            values[name] = int(clean_number(budget.get(name)) or 0)
        values["gpu_ms"] = clean_number(budget.get("gpu_ms"))
        return cls(**values)

    @property
    def host_ms(self) -> float:
        return self.data_worker_ms + self.data_collate_ms + self.h2d_ms + self.sync_wait_ms + self.rest_ms


@dataclass(frozen=True, slots=True)
class BudgetShares:
    """Where the budgeted steps' time went, as shares of their wall time (the PARTS add up to 1); `gpu` is the
    GPU's busy share beside them (it works while the host does the rest), None where not measured."""

    steps: int = 0
    data_worker: float = 0.0
    data_collate: float = 0.0
    h2d: float = 0.0
    sync_wait: float = 0.0
    rest: float = 0.0
    gpu: float | None = None
    h2d_bytes_per_step: float = 0.0
    pageable: float | None = None
    """Share of the copied bytes from pageable host memory; None without copies."""
    h2d_rate: float | None = None
    """Bytes/s while copying."""
    syncs_per_step: float = 0.0

    @property
    def data(self) -> float:
        return self.data_worker + self.data_collate

    @classmethod
    def of(cls, budgets: Iterable[StepTimeBudget]) -> BudgetShares:
        steps = list(budgets)
        total = sum(step.host_ms for step in steps)
        if not steps or total <= 0:
            return cls()
        timed = [step for step in steps if step.gpu_ms is not None]
        timed_total = sum(step.host_ms for step in timed)
        copied = sum(step.h2d_bytes for step in steps)
        copy_ms = sum(step.h2d_ms for step in steps)
        return cls(
            steps=len(steps),
            data_worker=sum(s.data_worker_ms for s in steps) / total,
            data_collate=sum(s.data_collate_ms for s in steps) / total,
            h2d=sum(s.h2d_ms for s in steps) / total,
            sync_wait=sum(s.sync_wait_ms for s in steps) / total,
            rest=sum(s.rest_ms for s in steps) / total,
            gpu=min(1.0, sum(s.gpu_ms or 0.0 for s in timed) / timed_total) if timed and timed_total > 0 else None,
            h2d_bytes_per_step=copied / len(steps),
            pageable=sum(s.h2d_pageable_bytes for s in steps) / copied if copied else None,
            h2d_rate=copied / (copy_ms / 1e3) if copied and copy_ms > 0 else None,
            syncs_per_step=sum(s.syncs for s in steps) / len(steps),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            name: (round(value, 4) if isinstance(value, float) else value)
            for name, value in ((field, getattr(self, field)) for field in self.__slots__)
        }
