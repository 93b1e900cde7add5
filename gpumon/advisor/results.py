"""Results of experiments: one VariantResult per measured variant, and the GuidedReport of a whole run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from gpumon.advisor.measure import Measurement, speedup
from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals

OK = "ok"
FAILED = "failed"
"""The variant's run crashed (its reason says how)."""
OOM = "oom"
TIMEOUT = "timeout"
NOT_APPLIED = "not_applied"
"""The knob was not applied: the command does not read it (needs a code change), or it never took effect."""
SKIPPED = "skipped"
"""Not run (e.g. a trial-only knob on an attached job)."""
CANCELLED = "cancelled"
STATUSES = (OK, FAILED, OOM, TIMEOUT, NOT_APPLIED, SKIPPED, CANCELLED)

KIND_LIVE = "live"
KIND_TRIAL = "trial"

PHASES = {
    "start": "a trial run: from stopping the previous trial to the new one's first step (process start, imports, "
    "CUDA and DataLoader workers starting)",
    "apply": "a live change: from asking for it to seeing it in effect (and any rollback before it)",
    "warmup": "after the first step or the change, left out of the figures",
    "measure": "the measured windows",
    "after": "the sync count, the signals, a profiler capture",
}
"""VariantResult.phases: the names and what each covers."""


class _VariantIdentityRequired(TypedDict):
    label: str
    change: Mapping[str, Any]
    knobs: Mapping[str, Any]
    kind: str


class VariantIdentity(_VariantIdentityRequired, total=False):
    """What a variant is, known before it runs: `VariantResult(**identity, status=..., ...)` type-checks."""

    flags: tuple[str, ...]
    pid: int | None


@dataclass(frozen=True, slots=True)
class VariantResult:
    """One measured variant (the baseline is one too, with no change)."""

    label: str
    change: Mapping[str, Any]
    """The knobs this variant changed on top of the ones kept before it."""
    knobs: Mapping[str, Any]
    """Every knob set for this variant (kept ones included)."""
    kind: str
    status: str = OK
    reason: str = ""
    measurement: Measurement | None = None
    signals: Signals | None = field(default=None, repr=False)
    applied: Mapping[str, str] = field(default_factory=dict)
    """How each knob of `change` was confirmed: "hook", "script" (it acknowledged it) or "observed" (state)."""
    flags: tuple[str, ...] = ()
    kept: bool = False
    pid: int | None = None
    phases: Mapping[str, float] = field(default_factory=dict)
    """Wall seconds of its phases, in order (PHASES): where a guided run's time goes."""

    @property
    def ok(self) -> bool:
        return self.status == OK and self.measurement is not None and bool(self.measurement.rates)

    def with_kept(self, kept: bool) -> VariantResult:
        return replace(self, kept=kept)

    def to_dict(self, baseline: Measurement | None = None) -> dict[str, Any]:
        gain = speedup(self.measurement, baseline)
        return {
            "label": self.label,
            "change": dict(self.change),
            "knobs": dict(self.knobs),
            "kind": self.kind,
            "status": self.status,
            "reason": self.reason,
            "kept": self.kept,
            "flags": list(self.flags),
            "applied": dict(self.applied),
            "pid": self.pid,
            "measurement": self.measurement.to_dict() if self.measurement is not None else None,
            "speedup": None if gain is None else round(gain, 3),
            "phases": {name: round(seconds, 2) for name, seconds in self.phases.items()},
        }


@dataclass(frozen=True, slots=True)
class Unrestored:
    """A knob an experiment changed on a running job and could not put back (the job stopped answering)."""

    knob: str
    left: Any
    """The value the job was last seen with (the experiment's)."""
    should_be: Any
    """The value it had before the experiment (or the one kept)."""

    def text(self) -> str:
        return f"{self.knob} left at {self.left!r} (should be {self.should_be!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "left": self.left, "should_be": self.should_be}


@dataclass(frozen=True, slots=True)
class GuidedReport:
    """A guided run: the baseline, every variant tried in order, the knobs kept and the code change."""

    baseline: VariantResult
    variants: tuple[VariantResult, ...] = ()
    kept: Mapping[str, Any] = field(default_factory=dict)
    finding: Finding | None = None
    """The diagnosis of the baseline."""
    final_finding: Finding | None = None
    """The diagnosis after the kept changes."""
    code: tuple[str, ...] = ()
    advice: tuple[str, ...] = ()
    """Findings no knob can fix, with the code change to make (e.g. DataParallel -> DDP)."""
    skipped: tuple[str, ...] = ()
    """Experiments not run, with why."""
    stopped: str = ""
    """Why the run ended."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Device, date, command."""
    unrestored: tuple[Unrestored, ...] = ()
    """Knobs left changed on the job (live experiments): the job did not answer the rollback in time."""

    @property
    def rows(self) -> tuple[VariantResult, ...]:
        return (self.baseline, *self.variants)

    @property
    def best(self) -> VariantResult:
        kept = [v for v in self.variants if v.kept]
        return kept[-1] if kept else self.baseline

    def to_dict(self) -> dict[str, Any]:
        base = self.baseline.measurement
        best = self.best.measurement
        gain = speedup(best, base)
        return {
            "baseline": self.baseline.to_dict(base),
            "variants": [v.to_dict(base) for v in self.variants],
            "kept": dict(self.kept),
            "speedup": None if gain is None else round(gain, 3),
            "finding": self.finding.to_dict() if self.finding else None,
            "final_finding": self.final_finding.to_dict() if self.final_finding else None,
            "code": list(self.code),
            "advice": list(self.advice),
            "skipped": list(self.skipped),
            "stopped": self.stopped,
            "meta": dict(self.meta),
            "unrestored": [knob.to_dict() for knob in self.unrestored],
        }
