"""The guided chain with fake measurements: what is kept, what stops it, the noise, failures, skips, cancel."""

from __future__ import annotations

import threading

from advisor_support import FakeRunner, measurement

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun
from gpumon.advisor.measure import beats
from gpumon.advisor.results import CANCELLED, FAILED, OOM, TIMEOUT

NUM_WORKERS = Experiment({"num_workers": 8}, previous={"num_workers": 0})
PIN = Experiment({"pin_memory": True}, previous={"pin_memory": False})
PREFETCH = Experiment({"prefetch_factor": 4}, previous={"prefetch_factor": 2})
AMP = Experiment({"amp_bf16": True}, previous={"amp_bf16": False})


def key(**knobs: object) -> frozenset:
    return frozenset(knobs.items())


def test_a_win_beyond_the_noise_is_kept_and_the_chain_stops_when_nothing_else_wins() -> None:
    runner = FakeRunner(
        measurement(100, 102, 98),
        {
            key(num_workers=8): measurement(300, 305, 295),
            key(num_workers=8, pin_memory=True): measurement(304, 309, 300),  # +1%: inside the noise
            key(num_workers=8, prefetch_factor=4): measurement(250, 251, 249),  # slower
        },
    )
    report = GuidedRun(runner, only=[NUM_WORKERS, PIN, PREFETCH]).run()
    assert [v.label for v in report.variants] == [
        "num_workers 0 -> 8",
        "pin_memory off -> on",
        "prefetch_factor 2 -> 4",
    ]
    assert [v.kept for v in report.variants] == [True, False, False]
    assert report.kept == {"num_workers": 8}
    assert report.best.label == "num_workers 0 -> 8"
    assert report.code == ("DataLoader(..., num_workers=8)",)
    assert ("keep", {"num_workers": 8}) in runner.calls
    assert ("discard", {"pin_memory": True}) in runner.calls and ("discard", {"prefetch_factor": 4}) in runner.calls
    assert runner.calls[-1] == ("finish", {"num_workers": 8})
    assert report.stopped == "nothing else won beyond the noise"


def test_each_variant_builds_on_the_ones_kept_before_it() -> None:
    runner = FakeRunner(
        measurement(100, 100, 100),
        {
            key(num_workers=8): measurement(200, 200, 200),
            key(num_workers=8, pin_memory=True): measurement(260, 262, 258),
        },
    )
    report = GuidedRun(runner, only=[NUM_WORKERS, PIN]).run()
    assert report.kept == {"num_workers": 8, "pin_memory": True}
    assert [call for call in runner.calls if call[0] == "run"] == [
        ("run", {"num_workers": 8}),
        ("run", {"num_workers": 8, "pin_memory": True}),
    ]
    assert report.code == ("DataLoader(..., num_workers=8, pin_memory=True)", "x = x.to(device, non_blocking=True)")


def test_the_noise_decides_what_counts_as_a_win() -> None:
    steady = measurement(100, 101, 99)
    assert beats(measurement(110, 111, 109), steady)
    assert not beats(measurement(110, 130, 90), steady), "a 10% gain inside a +-20% spread is no win"
    assert not beats(measurement(102, 102, 102), steady), "below the 3% minimum gain"
    assert not beats(measurement(95, 95, 95), steady)


def test_failures_are_recorded_with_their_reason_and_the_chain_goes_on() -> None:
    runner = FakeRunner(
        measurement(100, 100, 100),
        {
            key(amp_bf16=True): (OOM, "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"),
            key(num_workers=8): (TIMEOUT, "no training step within 180 s"),
            key(pin_memory=True): (FAILED, "exit status 1: RuntimeError: boom"),
            key(prefetch_factor=4): measurement(150, 150, 150),
        },
    )
    report = GuidedRun(runner, only=[AMP, NUM_WORKERS, PIN, PREFETCH]).run()
    assert [(v.status, v.kept) for v in report.variants] == [
        (OOM, False),
        (TIMEOUT, False),
        (FAILED, False),
        ("ok", True),
    ]
    assert "Tried to allocate" in report.variants[0].reason
    assert report.kept == {"prefetch_factor": 4}
    assert ("discard", {"amp_bf16": True}) in runner.calls, "a failed live change is rolled back too"


def test_a_baseline_that_cannot_be_measured_stops_the_run_with_its_reason() -> None:
    class Broken(FakeRunner):
        def baseline(self):  # type: ignore[no-untyped-def]
            result = super().baseline()
            from dataclasses import replace

            return replace(result, status=FAILED, reason="exit status 2: no such file", measurement=None)

    report = GuidedRun(Broken(measurement(1), {}), only=[NUM_WORKERS]).run()
    assert report.variants == ()
    assert "no such file" in report.stopped
    assert not report.kept


def test_experiments_the_runner_cannot_do_are_listed_as_not_tried() -> None:
    runner = FakeRunner(
        measurement(100, 100, 100),
        {key(num_workers=8): measurement(100, 100, 100)},
        unsupported=frozenset({"amp_bf16"}),
    )
    report = GuidedRun(runner, only=[AMP, NUM_WORKERS]).run()
    assert [v.label for v in report.variants] == ["num_workers 0 -> 8"]
    assert report.skipped == ("amp_bf16 off -> on: needs a trial run",)


def test_cancel_stops_between_variants_and_still_finishes() -> None:
    cancel = threading.Event()

    class Cancelling(FakeRunner):
        def run(self, experiment, kept, against=None):  # type: ignore[no-untyped-def]
            cancel.set()
            result = super().run(experiment, kept, against)
            from dataclasses import replace

            return replace(result, status=CANCELLED, reason="cancelled", measurement=None)

    runner = Cancelling(measurement(100, 100, 100), {})
    report = GuidedRun(runner, only=[NUM_WORKERS, PIN], cancel=cancel).run()
    assert [v.status for v in report.variants] == [CANCELLED]
    assert report.stopped == "cancelled"
    assert runner.calls[-1][0] == "finish"


def test_the_plan_comes_from_the_diagnosis_of_the_best_variant(demo_signals) -> None:  # type: ignore[no-untyped-def]
    events: list[tuple[str, object]] = []
    runner = FakeRunner(measurement(60, 61, 59), {}, signals=demo_signals)
    cores = demo_signals.host.cores
    runner.outcomes = {key(num_workers=cores and max(2, min(16, cores - 2))): measurement(150, 150, 150)}
    report = GuidedRun(runner, listener=lambda event, payload: events.append((event, payload))).run()
    assert report.finding is not None and report.finding.category == "input_bound"
    first_plan = next(payload for event, payload in events if event == "plan")
    assert first_plan and next(iter(first_plan[0].knobs)) == "num_workers"
    assert report.variants[0].kept
    assert [event for event, _ in events][:3] == ["baseline", "finding", "plan"]
    assert events[-1][0] == "done"


def test_knobs_the_finding_rules_out_are_skipped_with_the_reason(demo_signals) -> None:  # type: ignore[no-untyped-def]
    """Input-bound (the recorded CPU demo): faster math cannot help, so bf16 is not tried while it holds."""
    workers = Experiment({"num_workers": 2}, previous={"num_workers": 0})
    runner = FakeRunner(measurement(60, 61, 59), {key(num_workers=2): measurement(61, 61, 61)}, signals=demo_signals)
    report = GuidedRun(runner, planner=lambda finding, signals, kept: [AMP, workers]).run()
    assert report.finding is not None and report.finding.category == "input_bound"
    assert [call for call in runner.calls if call[0] == "run"] == [("run", {"num_workers": 2})]
    assert report.skipped == (
        "amp_bf16 off -> on: ruled out while input_bound: the GPU waits for its input, faster math cannot help",
    )
    assert report.meta["wall_s"] >= 0


def test_loader_knobs_are_ruled_out_when_the_step_hardly_waits_for_data(demo_signals) -> None:  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from gpumon.advisor.guided import rules_out
    from gpumon.advisor.results import VariantResult
    from gpumon.advisor.rules import diagnose

    waits = VariantResult(label="b", change={}, knobs={}, kind="trial", signals=demo_signals)
    finding = diagnose(demo_signals)
    assert rules_out(finding, waits, PREFETCH) is None, "the demo waits for data: prefetching may help"
    hardly = replace(waits, signals=replace(demo_signals, step=replace(demo_signals.step, data_share=0.01)))
    healthy = replace(finding, category="healthy")
    assert rules_out(healthy, hardly, PREFETCH) == "ruled out: the step waits for data only 1% of the time"
    assert rules_out(healthy, hardly, PIN) is None, "pinning speeds the copy, not the wait"
    assert rules_out(healthy, hardly, AMP) is None


def test_each_variant_is_measured_against_the_best_so_far() -> None:
    """The runner is told the best measurement (and the gain a win needs), so it can stop once the verdict is
    settled: the baseline first, the winner after a win."""
    baseline, workers = measurement(100, 102, 98), measurement(300, 305, 295)
    runner = FakeRunner(
        baseline,
        {key(num_workers=8): workers, key(num_workers=8, pin_memory=True): measurement(304, 309, 300)},
    )
    GuidedRun(runner, only=[NUM_WORKERS, PIN], min_gain=0.05).run()
    assert [(r.best, r.min_gain) if r else None for r in runner.references] == [(baseline, 0.05), (workers, 0.05)]
