"""The guided run: measure the baseline, diagnose, try the catalogue's experiments one by one, keep what wins beyond
the noise, re-diagnose from the winner, and stop when a whole list of candidates brings no win.

An experiment is one knob at one value: after a win the plan may propose the same knob at its next value (a climb:
num_workers 2 -> 4 -> 8 -> 14), which is tried unless that value was tried before; a step that does not win ends it,
and one that ran slower than the value kept (an overshoot) is followed by the value halfway back (`halfway_back`).

Experiments the current finding rules out are skipped (said why in the report) while it holds: faster math while
the GPU waits for its input, or loader knobs when the step hardly waits for data."""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from gpumon.advisor.catalogue import (
    Experiment,
    code_change,
    experiments_for,
    halfway_back,
    needs_code_change,
    observed_value,
)
from gpumon.advisor.categories import INPUT_BOUND, IO_BOUND
from gpumon.advisor.measure import MIN_GAIN, SLOWER, Reference, decide
from gpumon.advisor.results import (
    CANCELLED,
    KIND_LIVE,
    NOT_APPLIED,
    GuidedReport,
    TrialOffer,
    Unrestored,
    VariantResult,
)
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import Signals

log = logging.getLogger(__name__)

MAX_VARIANTS = 12
MATH_KNOBS = frozenset({"amp_bf16", "tf32", "float32_matmul_precision", "channels_last", "cudnn_benchmark"})
"""Knobs that make the GPU's work faster: no use while the GPU waits for its input."""
DATA_WAIT_KNOBS = frozenset({"num_workers", "prefetch_factor", "persistent_workers"})
"""Knobs that shorten the wait for the next batch: no use when the step hardly waits."""
LITTLE_DATA_WAIT = 0.02
"""A data-wait share of the step under which the DATA_WAIT_KNOBS are ruled out."""


class Runner(Protocol):
    """Runs variants: TrialRunner (separate runs of a command) or LiveRunner (the attached job)."""

    kind: str

    def supports(self, experiment: Experiment) -> str | None: ...

    def baseline(self) -> VariantResult: ...

    def run(self, experiment: Experiment, kept: Mapping[str, Any], against: Reference | None = None) -> VariantResult:
        """Measure `experiment` on top of the `kept` knobs; `against` the best so far, it may stop measuring once
        the verdict is settled (measure.settled)."""

    def keep(self, experiment: Experiment) -> None: ...

    def discard(self, experiment: Experiment) -> None: ...

    def finish(self, kept: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Restorer(Protocol):
    """A runner that changes knobs on a running job, which may fail to take them back (LiveRunner, TrialRunner)."""

    def unrestored(self) -> tuple[Unrestored, ...]:
        """Knobs left changed because the job did not acknowledge their rollback."""


Planner = Callable[[Finding, Signals, Mapping[str, Any]], list[Experiment]]
"""The experiments to try next: (finding, signals of the best variant, knobs kept so far) -> candidates."""
Listener = Callable[[str, Any], None]
"""Told about the run's events: ("baseline", VariantResult), ("finding", Finding), ("plan", [Experiment]),
("start", Experiment), ("result", VariantResult), ("done", GuidedReport)."""


def default_planner(cores: int | None = None) -> Planner:
    def plan(finding: Finding, signals: Signals, kept: Mapping[str, Any]) -> list[Experiment]:
        return experiments_for(finding, signals, cores=cores or os.cpu_count(), current=kept)

    return plan


def describe_machine(signals: Signals | None) -> str:
    if signals is not None and signals.gpu.gpus:
        names = sorted({gpu.name for gpu in signals.gpu.gpus if gpu.name})
        return ", ".join(names) + f" x{len(signals.gpu.gpus)}" if len(signals.gpu.gpus) > 1 else ", ".join(names)
    return f"CPU only ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


@dataclass(frozen=True, slots=True)
class JobCommand:
    """A running job's own command, as its hook's hello gives it: what a trial run of one knob would start again."""

    argv: tuple[str, ...]
    cwd: str = ""
    started_by_gpumon_run: bool = False
    """`gpumon run` started it (the hook injected): its command and directory are all it needs, its environment
    being the one gpumon run was given."""

    @classmethod
    def from_hello(cls, hello: Mapping[str, Any] | None) -> JobCommand | None:
        """The command from the hello's executable and argv (`python -m package` for a package's __main__.py);
        None where it cannot be run again (`python -c`, an empty argv)."""
        if not hello:
            return None
        argv = [str(arg) for arg in hello.get("argv") or []]
        executable = str(hello.get("executable") or "python")
        if not argv or argv[0] in ("-c", "-", "") or "..." in argv:
            return None
        if os.path.basename(argv[0]) == "__main__.py":
            argv = ["-m", os.path.basename(os.path.dirname(argv[0])), *argv[1:]]
        elif argv[0] == "-m":
            return None  # python -m with the module name lost
        return cls((executable, *argv), str(hello.get("cwd") or ""), bool(hello.get("injected")))


def trial_offer(experiment: Experiment, why: str, command: JobCommand | None, signals: Signals | None) -> TrialOffer:
    """The trial run that can measure `experiment` where it could not be measured live: `gpumon experiment --try`
    on the job's own command (a job `gpumon run` started), on the GPU the job uses."""
    shares = ""
    if signals is not None and signals.gpu.gpus:
        shares = ", ".join(f"GPU {gpu.index}" + (f" ({gpu.name})" if gpu.name else "") for gpu in signals.gpu.gpus)
    tries: list[str] = []
    for name, value in experiment.knobs.items():
        tries += ["--try", f"{name}={json.dumps(value)}"]
    argv: tuple[str, ...] = ()
    if command is not None and command.started_by_gpumon_run:
        argv = ("gpumon", "experiment", *tries, "--", *command.argv)
    return TrialOffer(
        label=experiment.label,
        knobs=dict(experiment.knobs),
        why=why,
        command=argv,
        cwd=command.cwd if argv and command is not None else "",
        shares=shares,
    )


class GuidedRun:
    """Chains experiments on `runner`. `cancel` stops it between (and, through the runner, inside) variants."""

    def __init__(
        self,
        runner: Runner,
        *,
        planner: Planner | None = None,
        max_variants: int = MAX_VARIANTS,
        min_gain: float = MIN_GAIN,
        cancel: threading.Event | None = None,
        listener: Listener | None = None,
        meta: Mapping[str, Any] | None = None,
        only: Sequence[Experiment] | None = None,
        job_command: JobCommand | None = None,
    ) -> None:
        self.runner = runner
        self.job_command = job_command
        """The attached job's command (live runs): a knob that cannot be measured live is offered as a trial run
        of it."""
        self.offers: dict[str, TrialOffer] = {}
        self.planner = planner or default_planner()
        self.max_variants = max_variants
        self.min_gain = min_gain
        self.cancel = cancel if cancel is not None else threading.Event()
        self.listener = listener
        self.meta = dict(meta or {})
        self.only = list(only) if only is not None else None
        """A fixed list of experiments to run in order (no diagnosis-driven plan), each kept if it wins."""
        self.started = time.monotonic()
        self.ruled_out: dict[str, str] = {}
        """Experiments skipped because the finding at the time ruled them out (dropped if tried later)."""
        self.refused: set[str] = set()
        """Knobs (Experiment.key) the runner cannot do: listed once, never proposed again."""

    def _tell(self, event: str, payload: Any) -> None:
        if self.listener is not None:
            try:
                self.listener(event, payload)
            except Exception:  # a broken view must not stop the run
                log.warning("the guided run's listener failed on %r", event, exc_info=True)

    def run(self) -> GuidedReport:
        variants: list[VariantResult] = []
        skipped: list[str] = []
        kept: dict[str, Any] = {}
        advice: list[str] = []
        finding = final = None
        stopped = ""
        self.started = time.monotonic()
        self.ruled_out = {}
        self.refused = set()
        self.offers = {}
        baseline = self.runner.baseline()
        self._tell("baseline", baseline)
        best = baseline
        try:
            if not baseline.ok:
                stopped = f"the baseline could not be measured: {baseline.reason or baseline.status}"
                return self._report(baseline, variants, kept, finding, final, advice, skipped, stopped)
            if baseline.signals is not None:
                finding = final = diagnose(baseline.signals)
                self._tell("finding", finding)
                advice = self._advice(finding)
            tried: set[str] = set()  # Experiment.ident: each knob at each value once
            while len(variants) < self.max_variants:
                candidates = self._candidates(final, best, kept, tried, skipped)
                self._tell("plan", candidates)
                if not candidates:
                    stopped = stopped or "no experiment left to try"
                    break
                won = False
                undecided = 0  # this plan's variants without a verdict: inconclusive, not in effect
                queue = list(candidates)
                while queue:
                    experiment = queue.pop(0)
                    if self.cancel.is_set() or len(variants) >= self.max_variants:
                        break
                    if self._refuse(experiment, best, skipped):
                        continue  # e.g. a DataLoader knob after another one did not apply live: the next one
                    tried.add(experiment.ident)
                    self.ruled_out.pop(experiment.key, None)
                    self._tell("start", experiment)
                    assert best.measurement is not None
                    result = self.runner.run(experiment, kept, Reference(best.measurement, self.min_gain))
                    if result.ok and result.measurement is not None:
                        result = result.with_decision(decide(result.measurement, best.measurement, self.min_gain))
                    else:
                        result = result.with_kept(False)
                    wins = result.kept
                    undecided += result.inconclusive or result.status == NOT_APPLIED
                    if result.status == NOT_APPLIED:
                        self._offer(experiment, result.reason, best)
                    variants.append(result)
                    self._tell("result", result)
                    if result.status == CANCELLED:
                        break
                    if wins:
                        self.runner.keep(experiment)
                        kept.update(experiment.knobs)
                        best = result
                        if result.signals is not None:
                            final = diagnose(result.signals)
                            self._tell("finding", final)
                        won = True
                        break  # re-plan from the winner's diagnosis
                    self.runner.discard(experiment)
                    if self._unrestored():
                        stopped = f"the job stopped answering: {result.reason or result.status}"
                        break
                    retreat = halfway_back(experiment, kept) if self._lost_ground(result) else None
                    if retreat is not None and retreat.ident not in tried:
                        queue.insert(0, retreat)
                if self.cancel.is_set() or (variants and variants[-1].status == CANCELLED):
                    stopped = "cancelled"
                    break
                if stopped:
                    break
                if not won:
                    stopped = (
                        f"no knob left to try ({undecided} without a verdict)"
                        if undecided
                        else "nothing else won beyond the noise"
                    )
                    break
            else:
                stopped = f"stopped after {self.max_variants} variants"
        finally:
            self.runner.finish(kept)
        return self._report(baseline, variants, kept, finding, final, advice, skipped, stopped)

    def _refuse(self, experiment: Experiment, best: VariantResult, skipped: list[str]) -> bool:
        """Whether the runner cannot do `experiment` now (asked again before each run: a live runner may have
        learnt since the plan that a kind of knob cannot apply); listed with why and offered as a trial run."""
        if experiment.key in self.refused:
            return True
        why_not = self.runner.supports(experiment)
        if why_not is None:
            return False
        self.refused.add(experiment.key)
        skipped.append(f"{experiment.label}: {why_not}")
        self._offer(experiment, why_not, best)
        return True

    def _offer(self, experiment: Experiment, why: str, best: VariantResult) -> None:
        """A knob a live run could not measure: the trial run that can."""
        if self.runner.kind == KIND_LIVE:
            why = why.removesuffix("; a trial run can measure it")
            self.offers[experiment.ident] = trial_offer(experiment, why, self.job_command, best.signals)

    def _unrestored(self) -> tuple[Unrestored, ...]:
        return self.runner.unrestored() if isinstance(self.runner, Restorer) else ()

    @staticmethod
    def _lost_ground(result: VariantResult) -> bool:
        """The variant ran slower than the best so far, beyond the noise (not merely no faster, nor undecided)."""
        return result.decision is not None and result.decision.outcome == SLOWER

    def _candidates(
        self, finding: Finding | None, best: VariantResult, kept: Mapping[str, Any], tried: set[str], skipped: list[str]
    ) -> list[Experiment]:
        if self.only is not None:
            planned = list(self.only)
        elif finding is None or best.signals is None:
            return []
        else:
            planned = self.planner(finding, best.signals, kept)
        runnable = []
        for experiment in planned:
            if experiment.ident in tried or experiment.key in self.refused:
                continue
            experiment = with_previous(experiment, kept, best.signals)
            if self._refuse(experiment, best, skipped):
                continue
            ruled_out = None if self.only is not None or finding is None else rules_out(finding, best, experiment)
            if ruled_out is not None:
                self.ruled_out[experiment.key] = f"{experiment.label}: {ruled_out}"
                continue
            runnable.append(experiment)
        return runnable

    @staticmethod
    def _advice(finding: Finding) -> list[str]:
        lines = []
        for item in (finding, *finding.secondary):
            code = needs_code_change(item.category)
            if code:
                lines.append(f"{item.category}: {code}")
        return lines

    def _report(
        self,
        baseline: VariantResult,
        variants: list[VariantResult],
        kept: dict[str, Any],
        finding: Finding | None,
        final: Finding | None,
        advice: list[str],
        skipped: list[str],
        stopped: str,
    ) -> GuidedReport:
        meta = {
            "date": datetime.date.today().isoformat(),
            "runner": self.runner.kind,
            "device": describe_machine(baseline.signals),
            "wall_s": round(time.monotonic() - self.started, 1),
            "trial_starts": getattr(self.runner, "runs", None),
            **self.meta,
        }
        report = GuidedReport(
            baseline=baseline,
            variants=tuple(variants),
            kept=dict(kept),
            finding=finding,
            final_finding=final,
            code=tuple(code_change(kept)),
            advice=tuple(advice),
            skipped=(*skipped, *self.ruled_out.values()),
            stopped=stopped,
            meta=meta,
            unrestored=self._unrestored(),
            offers=tuple(self.offers.values()),
        )
        self._tell("done", report)
        return report


def rules_out(finding: Finding, best: VariantResult, experiment: Experiment) -> str | None:
    """Why the finding of the best variant so far rules `experiment` out (None: worth a try)."""
    knobs = set(experiment.knobs)
    if finding.category in (INPUT_BOUND, IO_BOUND) and knobs <= MATH_KNOBS:
        return f"ruled out while {finding.category}: the GPU waits for its input, faster math cannot help"
    share = best.signals.step.data_share if best.signals is not None else None
    if share is not None and share < LITTLE_DATA_WAIT and knobs <= DATA_WAIT_KNOBS:
        return f"ruled out: the step waits for data only {share:.0%} of the time"
    return None


def with_previous(experiment: Experiment, kept: Mapping[str, Any], signals: Signals | None) -> Experiment:
    """The experiment with the values its knobs had before filled in where it did not say (labels, rollback)."""
    missing = [name for name in experiment.knobs if experiment.previous.get(name) is None]
    if not missing:
        return experiment
    previous = dict(experiment.previous)
    for name in missing:
        previous[name] = (
            kept[name] if name in kept else (observed_value(name, signals) if signals is not None else None)
        )
    return replace(experiment, previous=previous)
