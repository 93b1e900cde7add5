"""Results of experiments: one VariantResult per measured variant, and the GuidedReport of a whole run."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from gpumon.advisor.catalogue import OWNER_KNOBS
from gpumon.advisor.measure import INCONCLUSIVE, NO_WIN, SLOWER, WIN, Decision, Measurement, gain_text, speedup
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
    decision: Decision | None = None
    """The verdict against the best so far (measure.decide): set by the guided run with `kept`."""

    @property
    def ok(self) -> bool:
        return self.status == OK and self.measurement is not None and bool(self.measurement.rates)

    def with_kept(self, kept: bool) -> VariantResult:
        return replace(self, kept=kept)

    def with_decision(self, decision: Decision | None) -> VariantResult:
        return replace(self, decision=decision, kept=decision is not None and decision.outcome == WIN)

    def outcome(self, is_baseline: bool = False) -> tuple[str, str]:
        """(a word or two for the row, the reason on its own line): ('kept', 'a win beyond the noise (+12%, ...)'),
        ('inconclusive', 'noise ±91%; to decide: ...'), ('not in effect', 'not in effect within 90 s ...')."""
        m = self.measurement
        rolled_back = "; rolled back" if self.kind == KIND_LIVE and not is_baseline else ""
        if self.status != OK:
            word = STATUS_WORDS.get(self.status, self.status)
            return word, self.reason
        if is_baseline:
            return "baseline", "" if m is None else baseline_reason(m)
        settled = f"; {m.stopped}" if m is not None and m.stopped else ""
        decision = self.decision
        if decision is None:  # measured outside a guided run: nothing to judge it against
            return ("kept" if self.kept else "measured"), (settled.lstrip("; ") + rolled_back).lstrip("; ")
        if decision.outcome == WIN:
            return "kept", decision.text + settled
        word = {NO_WIN: "no win", SLOWER: "slower", INCONCLUSIVE: "inconclusive"}[decision.outcome]
        return word, decision.text + rolled_back + settled

    @property
    def inconclusive(self) -> bool:
        return self.decision is not None and self.decision.outcome == INCONCLUSIVE

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
            "decision": self.decision.to_dict() if self.decision is not None else None,
        }


STATUS_WORDS = {
    FAILED: "failed",
    OOM: "out of memory",
    TIMEOUT: "timed out",
    NOT_APPLIED: "not applied",
    SKIPPED: "skipped",
    CANCELLED: "cancelled",
}
"""The row's word for a variant that was not measured to a verdict."""


def baseline_reason(measurement: Measurement) -> str:
    """The baseline's line: its windows and noise, and what that noise lets the run tell apart."""
    windows = len(measurement.rates)
    text = f"{windows} window{'s' if windows != 1 else ''}, noise ±{measurement.noise:.0%}"
    return f"{text}; {measurement.stopped}" if measurement.stopped else text


@dataclass(frozen=True, slots=True)
class TrialOffer:
    """A knob that could not be measured live, and the trial run of the same command that can measure it."""

    label: str
    knobs: Mapping[str, Any]
    why: str
    """Why it could not be measured live (a restart needed, not in effect within its window)."""
    command: tuple[str, ...] = ()
    """`gpumon experiment --try ... -- CMD` for the job's own command; empty where the command is not known."""
    cwd: str = ""
    shares: str = ""
    """The GPU the trial would share with the running job ('GPU 0 (NVIDIA H200)'); empty on a CPU job."""

    def text(self) -> str:
        if not self.command:
            return f"{self.label}: {self.why}; a trial run of the job's command can measure it (gpumon experiment)"
        where = f"cd {shell_quote(self.cwd)} && " if self.cwd else ""
        beside = f"; it would share {self.shares} with the running job" if self.shares else ""
        return f"{self.label}: {self.why}; a trial run can measure it{beside}: {where}{shell_join(self.command)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "knobs": dict(self.knobs),
            "why": self.why,
            "command": list(self.command),
            "cwd": self.cwd,
            "shares": self.shares,
        }


def shell_quote(word: str) -> str:
    return shlex.quote(word)


def shell_join(words: Sequence[str]) -> str:
    return " ".join(shell_quote(word) for word in words)


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


PROVED, REFUTED, UNDECIDED = "proved", "refuted", "undecided"


@dataclass(frozen=True, slots=True)
class OwnerTest:
    """What a variant that took one owner of GPU idle time away (catalogue.OWNER_KNOBS) says of that owner: proved
    (a win: the owner held about 1 - 1/speed-up of the step), refuted (no win, or slower) or undecided (the noise)."""

    category: str
    what: str
    knob: str
    result: str
    gain: float | None
    """The variant's rate over the best before it, less 1."""

    @property
    def share(self) -> float | None:
        if self.result != PROVED or self.gain is None or self.gain <= 0:
            return None
        return 1.0 - 1.0 / (1.0 + self.gain)

    def text(self, named: str | None = None) -> str:
        """'allocator_churn proved: skip_empty_cache gave +95%, so <what> held about 49% of the step (the diagnosis
        had named launch_bound)'."""
        if self.result == PROVED:
            share = self.share
            held = f", so {self.what} held about {share:.0%} of the step" if share is not None else ""
            aside = f" (the diagnosis had named {named})" if named and named != self.category else ""
            return f"{self.category} proved: {self.knob} gave {gain_text(self.gain)}{held}{aside}"
        if self.result == REFUTED:
            return f"{self.category} refuted: {self.knob} gave no win beyond the noise ({gain_text(self.gain)})"
        return f"{self.category} undecided: {self.knob} measured {gain_text(self.gain)}, inside the noise"

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "knob": self.knob,
            "result": self.result,
            "gain": None if self.gain is None else round(self.gain, 4),
            "share": None if self.share is None else round(self.share, 4),
        }


def owner_tests(variants: Sequence[VariantResult]) -> tuple[OwnerTest, ...]:
    """Each decided variant that turned an owner knob on, as the test of that owner it was."""
    out = []
    for variant in variants:
        decision = variant.decision
        if decision is None or not variant.ok:
            continue
        for knob, value in variant.change.items():
            if knob not in OWNER_KNOBS or not value:
                continue
            category, what = OWNER_KNOBS[knob]
            if variant.kept:
                result = PROVED
            elif decision.outcome in (NO_WIN, SLOWER):
                result = REFUTED
            else:
                result = UNDECIDED
            out.append(OwnerTest(category, what, knob, result, decision.gain))
    return tuple(out)


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
    offers: tuple[TrialOffer, ...] = ()
    """Knobs that could not be measured live, each with the trial run that can."""

    @property
    def owners(self) -> tuple[OwnerTest, ...]:
        """The owners of GPU idle time this run tested on the job, each proved, refuted or undecided."""
        return owner_tests(self.variants)

    @property
    def verdict(self) -> str:
        """The run's verdict in one line, from its rows: what was kept, else why nothing was (inconclusive rows,
        knobs not in effect), never "nothing won" where a row could not be decided; then what each owner knob
        proved or refuted (and where the diagnosis had named another category)."""
        decided = [test for test in self.owners if test.result != UNDECIDED]
        if not decided:
            return self._kept_verdict()
        named = self.finding.category if self.finding else None
        return "; ".join([self._kept_verdict(), *(test.text(named) for test in decided)])

    def _kept_verdict(self) -> str:
        if not self.baseline.ok:
            return f"the baseline could not be measured: {self.baseline.reason or self.baseline.status}"
        kept = [v for v in self.variants if v.kept]
        if kept:
            gain = speedup(self.best.measurement, self.baseline.measurement)
            factor = f" ({gain:.1f}x)" if gain else ""
            return f"kept {', '.join(v.label for v in kept)}{factor}"
        undecided = [v for v in self.variants if v.inconclusive]
        if undecided:
            shown = "; ".join(
                f"{v.label} measured {gain_text(v.decision.gain if v.decision else None)}" for v in undecided
            )
            widest = max(undecided, key=lambda v: v.decision.noise if v.decision else 0.0)
            assert widest.decision is not None
            return (
                f"inconclusive: {shown}, inside noise of ±{widest.decision.noise:.0%}: no change kept, none ruled "
                f"out; to decide: {widest.decision.to_decide}"
            )
        unmeasured = [v for v in self.variants if v.status == NOT_APPLIED]
        if unmeasured:
            labels = ", ".join(v.label for v in unmeasured)
            others = " and nothing else won beyond the noise" if len(unmeasured) < len(self.variants) else ""
            return f"no change kept: {labels} could not be measured (not in effect){others}"
        if not self.variants:
            return "no change kept: nothing was tried"
        return "nothing won beyond the noise: no change to make"

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
            "offers": [offer.to_dict() for offer in self.offers],
            "verdict": self.verdict,
            "owners": [test.to_dict() for test in self.owners],
        }
