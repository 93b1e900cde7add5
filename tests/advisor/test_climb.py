"""The guided run climbs a knob that wins (num_workers 2 -> 4 -> 8 -> 14 on 16 cores; batch size doubling) while the
finding holds and the resource is not used up, stops at the first step that does not win, and goes halfway back after
a step that ran slower (an overshoot). A job with
heavy augmentation and 2 workers on a 16-core host stopped after 4 workers (1.84x) with 12 cores idle.

The runner is a fake whose speed and signals follow a synthetic curve of the knob's value; nothing here is measured."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, cast

import pytest
from advisor_support import measurement

from gpumon.advisor.catalogue import BATCH_MEMORY_SHARE, Experiment, experiments_for, halfway_back, worker_target
from gpumon.advisor.categories import INPUT_BOUND, LAUNCH_BOUND
from gpumon.advisor.guided import GuidedRun, default_planner
from gpumon.advisor.live import LiveRunner
from gpumon.advisor.measure import Reference, SnapshotLog
from gpumon.advisor.results import OK, VariantResult
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import SOURCE_HOOK, GpuSignals, Signals

GIB = 1 << 30
CORES = 16
GPU_RATE = 1000.0
"""Samples/s the synthetic GPU could take: the job waits for data for the rest of each step."""


def augmenting_job(workers: int, rate: float, idle_cores: int | None = None) -> Signals:
    """Signals of a job at `rate` samples/s whose workers each keep a core busy with augmentation (the main process
    one more)."""
    return Signals.of(
        source=SOURCE_HOOK,
        device="cuda",
        gpus=(GpuSignals(index=0, name="NVIDIA H100 80GB HBM3", utilization=100 * rate / GPU_RATE),),
        gpu_util=100 * rate / GPU_RATE,
        steps=200,
        data_share=1 - rate / GPU_RATE,
        samples_per_s=rate,
        num_workers=workers,
        pin_memory=True,
        prefetch_factor=4,
        persistent_workers=True,
        batch_size=64,
        worker_cpu=tuple(100.0 for _ in range(workers)),
        cores=CORES,
        idle_cores=idle_cores if idle_cores is not None else max(0, CORES - workers - 1),
    )


def worker_rate(workers: int) -> float:
    """Synthetic: each worker adds the same, like a loader-bound job seen (4 workers 1.84x of 2, 14 workers 5.7x)."""
    return 100.0 * workers / 2


class CurveRunner:
    """A trial runner whose variants run at `rate(knobs)` with `signals(knobs)`; records the knobs of every run."""

    kind = "trial"

    def __init__(
        self,
        rate: Callable[[Mapping[str, Any]], float],
        signals: Callable[[Mapping[str, Any]], Signals],
        start: Mapping[str, Any],
    ) -> None:
        self.rate, self.signals, self.start = rate, signals, dict(start)
        self.runs: list[dict[str, Any]] = []
        """The knobs each variant ran with."""
        self.changes: list[dict[str, Any]] = []
        """What each variant changed."""

    def supports(self, experiment: Experiment) -> str | None:
        return None

    def _result(self, label: str, change: Mapping[str, Any], kept: Mapping[str, Any]) -> VariantResult:
        knobs = {**self.start, **kept, **change}
        rate = self.rate(knobs)
        return VariantResult(
            label=label,
            change=dict(change),
            knobs={**kept, **change},
            kind=self.kind,
            status=OK,
            measurement=measurement(rate, rate * 1.01, rate * 0.99),
            signals=self.signals(knobs),
        )

    def baseline(self) -> VariantResult:
        return self._result("baseline", {}, {})

    def run(self, experiment: Experiment, kept: Mapping[str, Any], against: Reference | None = None) -> VariantResult:
        self.runs.append({**kept, **experiment.knobs})
        self.changes.append(dict(experiment.knobs))
        return self._result(experiment.label, experiment.knobs, kept)

    def keep(self, experiment: Experiment) -> None:
        pass

    def discard(self, experiment: Experiment) -> None:
        pass

    def finish(self, kept: Mapping[str, Any]) -> None:
        pass


def worker_runner(
    rate: Callable[[int], float] = worker_rate, idle: Callable[[int], int | None] = lambda workers: None
) -> CurveRunner:
    return CurveRunner(
        lambda knobs: rate(knobs["num_workers"]),
        lambda knobs: augmenting_job(knobs["num_workers"], rate(knobs["num_workers"]), idle(knobs["num_workers"])),
        {"num_workers": 2},
    )


def worker_steps(runner: CurveRunner) -> list[int]:
    """The worker counts tried, in order."""
    return [change["num_workers"] for change in runner.changes if "num_workers" in change]


def test_a_winning_worker_count_climbs_2_4_8_14_on_a_16_core_host() -> None:
    """The curve keeps rising past 14 workers: the climb stops at the cores less two, not at a loss."""
    runner = worker_runner()
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert report.finding is not None and report.finding.category == INPUT_BOUND
    assert worker_steps(runner) == [4, 8, 14]
    assert [variant.label for variant in report.variants] == [
        "num_workers 2 -> 4",
        "num_workers 4 -> 8",
        "num_workers 8 -> 14",
    ]
    assert all(variant.kept for variant in report.variants)
    assert report.kept == {"num_workers": 14}
    assert report.best.measurement is not None and report.best.measurement.rate == pytest.approx(700.0)
    assert report.final_finding is not None and report.final_finding.category == INPUT_BOUND, "GPU still waits"
    assert "1 of 16 cores idle" in report.final_finding.evidence
    assert runner.changes == [{"num_workers": 4}, {"num_workers": 8}, {"num_workers": 14}], "nothing else to try"
    assert report.stopped == "no experiment left to try"


def test_a_climb_stops_at_the_first_step_that_does_not_win() -> None:
    """8 workers run within the noise of 4 (the loader is not what is short any more): 14 is never tried."""
    runner = worker_runner(rate=lambda workers: {2: 100.0, 4: 184.0}.get(workers, 185.0))
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert worker_steps(runner) == [4, 8]
    assert [variant.kept for variant in report.variants] == [True, False]
    assert report.kept == {"num_workers": 4}
    assert report.stopped == "nothing else won beyond the noise"


def test_a_climb_step_that_runs_slower_is_followed_by_the_count_halfway_back() -> None:
    """Workers oversubscribe the cores past 10: 14 runs slower than 8, so 11 (halfway) is tried, wins, and is kept."""
    runner = worker_runner(rate=lambda workers: 50.0 * workers if workers <= 10 else 500.0 - 60.0 * (workers - 10))
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert worker_steps(runner) == [4, 8, 14, 11]
    assert [variant.kept for variant in report.variants] == [True, True, False, True]
    assert report.variants[-1].label == "num_workers 8 -> 11"
    assert report.kept == {"num_workers": 11}
    assert report.stopped == "no experiment left to try", "14 was tried: the climb from 11 has nowhere new to go"


def test_a_halfway_count_that_also_runs_slower_is_halved_again() -> None:
    """The best count is 9: 14 and then 11 run slower than 8, and 9, halfway between 8 and 11, wins."""
    runner = worker_runner(
        rate=lambda workers: 50.0 * workers if workers <= 9 else max(10.0, 450 - 80.0 * (workers - 9))
    )
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert worker_steps(runner) == [4, 8, 14, 11, 9]
    assert report.kept == {"num_workers": 9}


def test_only_a_climbing_knob_with_a_count_between_goes_halfway_back() -> None:
    assert halfway_back(Experiment({"num_workers": 30}), {"num_workers": 16}) == Experiment(
        {"num_workers": 23}, {"num_workers": 16}, "num_workers 30 ran slower than 16: the best lies between"
    )
    assert halfway_back(Experiment({"num_workers": 5}), {"num_workers": 4}) is None, "nothing lies between"
    assert halfway_back(Experiment({"num_workers": 16}), {}) is None, "a first jump is not a climb step"
    assert halfway_back(Experiment({"prefetch_factor": 8}), {"prefetch_factor": 2}) is None
    assert halfway_back(Experiment({"batch_size": 512}), {"batch_size": 256}) == Experiment(
        {"batch_size": 384}, {"batch_size": 256}, "batch_size 512 ran slower than 256: the best lies between"
    )


def test_a_climb_goes_no_further_than_the_idle_cores() -> None:
    """Workers that take two cores each: at 8 workers no core is idle, so the climb ends there, short of 14."""
    runner = worker_runner(idle=lambda workers: max(0, CORES - 2 * workers - 1))
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert worker_steps(runner) == [4, 8]
    assert report.kept == {"num_workers": 8}
    assert worker_target(augmenting_job(8, 400.0, idle_cores=0), CORES, climbing=True) is None
    assert worker_target(augmenting_job(4, 200.0, idle_cores=3), CORES, climbing=True) == 7, "4 + the 3 idle cores"


def test_a_climb_ends_when_the_finding_is_no_longer_input_bound() -> None:
    """At 8 workers the step hardly waits for data: the job is no longer input-bound, so no more workers."""
    runner = worker_runner(rate=lambda workers: 100.0 * workers / 2 if workers < 8 else GPU_RATE * 0.99)
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert report.final_finding is not None and report.final_finding.category != INPUT_BOUND
    assert report.kept["num_workers"] == 8
    assert worker_steps(runner) == [4, 8]


def test_the_first_jump_stays_capped_and_a_climb_never_passes_the_cores_less_two() -> None:
    assert worker_target(Signals.of(cores=64, num_workers=0), None) == 16, "an unmeasured first jump: 16 at most"
    assert worker_target(Signals.of(cores=64, num_workers=16, idle_cores=47), None, climbing=True) == 32
    assert worker_target(Signals.of(cores=64, num_workers=32, idle_cores=31), None, climbing=True) == 62
    assert worker_target(Signals.of(cores=64, num_workers=62, idle_cores=1), None, climbing=True) is None


def launch_bound_job(batch: int) -> Signals:
    """Tiny kernels (SM activity 15% at GPU-Util 90%); the peak memory grows with the batch (synthetic)."""
    return Signals.of(
        source=SOURCE_HOOK,
        device="cuda",
        gpus=(GpuSignals(index=0, name="NVIDIA H100 80GB HBM3", memory_total=80 * GIB),),
        gpu_util=90.0,
        sm_activity=15.0,
        steps=500,
        data_share=0.01,
        batch_size=batch,
        cudnn_benchmark=True,
        peak_memory=batch_memory(batch),
    )


def batch_memory(batch: int) -> int:
    """Synthetic: 1 GiB of weights and optimizer state, 40 MiB of activations a sample."""
    return GIB + batch * 40 * (1 << 20)


def batch_runner(rate: Callable[[int], float]) -> CurveRunner:
    return CurveRunner(
        lambda knobs: rate(knobs["batch_size"]),
        lambda knobs: launch_bound_job(knobs["batch_size"]),
        {"batch_size": 32},
    )


def test_a_winning_batch_size_doubles_while_twice_its_memory_fits() -> None:
    """32 -> 256 (the first jump) -> 512 -> 1024; at 1024 twice the peak (82 GiB) does not fit 90% of 80 GiB."""
    runner = batch_runner(rate=lambda batch: 10.0 * batch)
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert report.finding is not None and report.finding.category == LAUNCH_BOUND
    assert runner.changes == [{"batch_size": 256}, {"batch_size": 512}, {"batch_size": 1024}]
    assert report.kept == {"batch_size": 1024}
    assert 2 * batch_memory(512) <= BATCH_MEMORY_SHARE * 80 * GIB < 2 * batch_memory(1024)
    assert report.stopped == "no experiment left to try"


def test_a_batch_size_climb_stops_when_a_doubling_loses() -> None:
    runner = batch_runner(rate=lambda batch: 10.0 * min(batch, 256) - (batch > 256))
    report = GuidedRun(runner, planner=default_planner(CORES)).run()
    assert runner.changes == [{"batch_size": 256}, {"batch_size": 512}]
    assert report.kept == {"batch_size": 256}
    assert diagnose(launch_bound_job(256)).category == LAUNCH_BOUND


class LoaderClient:
    """Stands in for a JobClient: one DataLoader whose knobs change at once when set."""

    def __init__(self, num_workers: int) -> None:
        self.loader = {"num_workers": num_workers}
        self.sets: list[dict[str, Any]] = []
        self.ended = False
        self.pid = 4242

    def add_message_listener(self, listener: object) -> None:
        pass

    def view(self) -> SimpleNamespace:
        return SimpleNamespace(dataloaders=[dict(self.loader)], precision={})

    def set_knobs(self, knobs: Mapping[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        self.sets.append(dict(knobs))
        self.loader.update(knobs)
        return dict(knobs)


def test_a_live_climb_step_that_loses_goes_back_to_the_count_kept_before_it() -> None:
    """2 -> 4 won and was kept; 4 -> 8 lost: the job goes back to 4 workers, not to its own 2."""
    client = LoaderClient(2)
    live = LiveRunner(cast(Any, client), log=SnapshotLog(), warmup_s=0.0, apply_timeout_s=1.0)
    measured = VariantResult(label="", change={}, knobs={}, kind="live", status=OK, measurement=measurement(1.0))
    live._measure = lambda *args, **options: measured  # type: ignore[method-assign]
    four, eight = Experiment({"num_workers": 4}), Experiment({"num_workers": 8})
    assert live.run(four, {}).status == OK
    live.keep(four)
    assert live.run(eight, {"num_workers": 4}).status == OK and client.loader["num_workers"] == 8
    live.discard(eight)
    assert client.sets[-1] == {"num_workers": 4} and client.loader["num_workers"] == 4
    live.finish({"num_workers": 4})
    assert client.sets[-1] == {"num_workers": 4}, "nothing left to roll back"


def test_the_plan_after_a_winning_worker_count_proposes_the_next_one_from_the_count_kept() -> None:
    """The winner's own signals may lag (or miss) the DataLoader's settings: the climb starts from the value kept."""
    signals = augmenting_job(2, 100.0, idle_cores=11)
    finding = diagnose(signals)
    (first, *_) = experiments_for(finding, signals, cores=CORES, current={"num_workers": 4})
    assert first.knobs == {"num_workers": 8} and first.label == "num_workers 4 -> 8"
    assert experiments_for(finding, signals, cores=CORES)[0].knobs == {"num_workers": 4}, "no win yet: doubling 2"
