"""Helpers for the advisor tests: recorded cases (tests/fixtures/advisor) read back into Signals, fake runners."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.measure import Measurement, Reference
from gpumon.advisor.results import FAILED, OK, VariantResult
from gpumon.advisor.signals import Signals, build_signals
from gpumon.jobs.jobstate import replay_messages
from gpumon.jobs.pyspy.estimate import EstimateView
from gpumon.sampling.snapshot import Snapshot

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "advisor"
REPO = Path(__file__).resolve().parents[2]


def case_files() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


def load_case(path: Path) -> tuple[dict[str, Any], Signals]:
    """A recorded case's meta and the Signals the advisor builds from it (through the same code as live)."""
    data = json.loads(path.read_text())
    snapshots = [Snapshot.from_dict(s) for s in data["snapshots"]]
    if data.get("estimate"):
        est = data["estimate"]
        view: Any = EstimateView(
            pid=est["pid"],
            command=est.get("command", ""),
            rounds=est.get("rounds", 0),
            counts=est["counts"],
            recent=est["recent"],
            hot_frames=est.get("hot_frames", {}),
        )
    else:
        view = replay_messages(data["messages"], pid=data["pid"]).view()
    signals = build_signals(
        snapshots, view, pid=data["pid"], start=data["start"], end=data["end"], diagnosis=data.get("diagnosis")
    )
    return data["meta"], signals


def measurement(
    *rates: float, util: float | None = None, sm: float | None = None, peak: int | None = None
) -> Measurement:
    return Measurement(
        rates=tuple(rates),
        gpu_util=util,
        sm_activity=sm,
        peak_memory=peak,
        steps=10 * len(rates),
        seconds=4.0 * len(rates),
    )


class FakeRunner:
    """A runner with canned measurements per knob set: {frozenset(knobs.items()): Measurement or (status, reason)}.

    Records every call, so tests can check what was run, kept and rolled back.
    """

    kind = "trial"

    def __init__(
        self,
        baseline: Measurement,
        outcomes: Mapping[frozenset, Any],
        signals: Signals | None = None,
        unsupported: frozenset[str] = frozenset(),
    ) -> None:
        self.baseline_measurement = baseline
        self.outcomes = outcomes
        self.signals = signals
        self.unsupported = unsupported
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.references: list[Reference | None] = []
        """What each variant was measured against (`run`'s `against`)."""

    def supports(self, experiment: Experiment) -> str | None:
        return "needs a trial run" if set(experiment.knobs) & self.unsupported else None

    def baseline(self) -> VariantResult:
        self.calls.append(("baseline", {}))
        return VariantResult(
            label="baseline",
            change={},
            knobs={},
            kind=self.kind,
            measurement=self.baseline_measurement,
            signals=self.signals,
        )

    def run(self, experiment: Experiment, kept: Mapping[str, Any], against: Reference | None = None) -> VariantResult:
        knobs = {**kept, **experiment.knobs}
        self.calls.append(("run", knobs))
        self.references.append(against)
        outcome = self.outcomes.get(frozenset(knobs.items()))
        base = dict(label=experiment.label, change=dict(experiment.knobs), knobs=knobs, kind=self.kind)
        if isinstance(outcome, Measurement):
            return VariantResult(**base, status=OK, measurement=outcome, signals=self.signals)
        status, reason = outcome if outcome is not None else (FAILED, "no canned outcome")
        return VariantResult(**base, status=status, reason=reason)

    def keep(self, experiment: Experiment) -> None:
        self.calls.append(("keep", dict(experiment.knobs)))

    def discard(self, experiment: Experiment) -> None:
        self.calls.append(("discard", dict(experiment.knobs)))

    def finish(self, kept: Mapping[str, Any]) -> None:
        self.calls.append(("finish", dict(kept)))
