"""The trial and live runners on real CPU processes: a demo trial run (num_workers 0 -> 2), failures (crash, OOM,
timeout), and a live change rolled back. (Knobs the hook applies to any script vs knobs that need a code change:
test_cli_advisor.py, through `gpumon experiment`.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from advisor_support import REPO

from gpumon import protocol
from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.live import LiveRunner, current_value, in_effect
from gpumon.advisor.measure import Measurement, Reference, SnapshotLog
from gpumon.advisor.report import result_text
from gpumon.advisor.results import FAILED, OK, OOM, TIMEOUT
from gpumon.advisor.trial import TrialRunner
from gpumon.jobs.client import JobClient
from gpumon.jobs.launch import LaunchedJob
from gpumon.sampling.sampler import Sampler

PLAIN = [sys.executable, str(Path(__file__).parent / "jobs" / "plain_train.py"), "--seconds", "120"]


@pytest.fixture
def sock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    directory = str(tmp_path / "sockets")
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    return directory


@pytest.fixture
def sampled() -> Iterator[tuple[Sampler, SnapshotLog]]:
    log = SnapshotLog()
    sampler = Sampler(interval=0.25, slow_interval=0.5)
    sampler.start(log)
    yield sampler, log
    sampler.stop()


def base_env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(REPO / "demo"), env.get("PYTHONPATH")]))
    env.pop(protocol.KNOBS_ENV, None)
    return env


def runner(command: list[str], sampled: tuple[Sampler, SnapshotLog], **options: object) -> TrialRunner:
    sampler, log = sampled
    settings = dict(warmup_s=0.5, window_s=1.5, repeats=2, startup_timeout_s=90.0, stop_grace_s=5.0)
    settings.update(options)
    return TrialRunner(
        command,
        launcher=LaunchedJob,
        log=log,
        track=sampler.track_pids,
        cwd=str(REPO),
        base_env=base_env(),
        **settings,  # type: ignore[arg-type]
    )


def group_gone(pid: int | None) -> bool:
    assert pid is not None
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_demo_trial_run_measures_the_baseline_and_more_workers(sock_dir: str, sampled) -> None:  # type: ignore[no-untyped-def]
    demo = [
        sys.executable,
        "-m",
        "gpumon_demo",
        "--duration",
        "300",
        "--device",
        "cpu",
        "--progress-interval",
        "0",
        "--dataset-size",
        "20000",
        "--batch-size",
        "8",
    ]
    trials = runner(demo, sampled)
    baseline = trials.baseline()
    assert baseline.status == OK, baseline.reason
    assert baseline.measurement is not None and baseline.measurement.unit == "samples/s"
    assert len(baseline.measurement.rates) == 2 and all(rate > 0 for rate in baseline.measurement.rates)
    assert baseline.signals is not None and baseline.signals.device == "cpu"
    assert baseline.signals.loader.num_workers == 0
    assert baseline.signals.loader.batch_size == 8
    workers = trials.run(Experiment({"num_workers": 2}, previous={"num_workers": 0}), {})
    assert workers.status == OK, workers.reason
    assert workers.applied == {"num_workers": "script"}, "the demo acknowledges the knobs it reads"
    assert workers.signals is not None and workers.signals.loader.num_workers == 2
    assert len(workers.signals.host.worker_cpu) == 2, "both workers seen in the job's process tree"
    assert group_gone(baseline.pid) and group_gone(workers.pid), "each trial's process group is gone"


def test_a_crash_an_oom_and_a_timeout_are_recorded_with_their_reason(sock_dir: str, sampled) -> None:  # type: ignore[no-untyped-def]
    crash = runner([sys.executable, "-c", "raise SystemExit('boom: bad config')"], sampled).baseline()
    assert crash.status == FAILED and "exit status 1" in crash.reason and "boom: bad config" in crash.reason
    oom = runner(
        [
            sys.executable,
            "-c",
            "import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB'); sys.exit(1)",
        ],
        sampled,
    ).baseline()
    assert oom.status == OOM and "Tried to allocate 20.00 GiB" in oom.reason
    started = time.monotonic()
    stuck = runner([sys.executable, "-c", "import time; time.sleep(120)"], sampled, startup_timeout_s=1.0).baseline()
    assert stuck.status == TIMEOUT and "no training step within 1 s" in stuck.reason
    assert time.monotonic() - started < 30
    assert group_gone(stuck.pid), "the stuck trial was stopped"


def test_a_live_change_is_measured_and_rolled_back(sock_dir: str, sampled) -> None:  # type: ignore[no-untyped-def]
    _sampler, log = sampled
    env = protocol.injection_env(base_env())
    job = subprocess.Popen(
        PLAIN, env=env, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    client = JobClient(job.pid, wait_for_socket=True)
    try:
        live = LiveRunner(
            client, log=log, warmup_s=0.3, window_s=1.0, repeats=2, apply_timeout_s=30.0, sync_diagnosis=False
        )
        client.start()
        baseline = live.baseline()
        assert baseline.status == OK, baseline.reason
        experiment = Experiment({"num_workers": 1}, previous={"num_workers": 0})
        assert live.supports(experiment) is None
        assert live.supports(Experiment({"tf32": True})) is not None
        result = live.run(experiment, {})
        assert result.status == OK and result.kind == "live", result.reason
        assert current_value(client.view(), "num_workers") == 1
        live.discard(experiment)
        deadline = time.monotonic() + 30
        while not in_effect(client.view(), {"num_workers": 0}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert current_value(client.view(), "num_workers") == 0, "rolled back to the job's own setting"
    finally:
        client.stop()
        job.kill()
        job.wait()


def test_a_variant_measured_against_a_best_it_cannot_reach_stops_once_that_is_settled(sock_dir: str, sampled) -> None:  # type: ignore[no-untyped-def]
    """The best so far reaches the measured windows by both paths, a trial run and a live change on the running
    trial: against a best a million times faster, each stops after 2 of its 5 windows, and says why."""
    said: list[str] = []
    trials = runner(
        PLAIN, sampled, window_s=0.5, repeats=5, min_repeats=2, live_on_trial=True, live_warmup_s=0.3,
        live_apply_timeout_s=30.0, sync_diagnosis=False, progress=lambda message, _fraction: said.append(message),
    )  # fmt: skip
    unreachable = Reference(Measurement(rates=(1e9, 1e9)))
    one, two = Experiment({"num_workers": 1}, previous={"num_workers": 0}), Experiment({"num_workers": 2})
    try:
        by_trial = trials.run(one, {}, unreachable)
        trials.keep(one)
        live = trials.run(two, {"num_workers": 1}, unreachable)
    finally:
        trials.finish({"num_workers": 1})
    assert [by_trial.kind, live.kind] == ["trial", "live"], (by_trial.reason, live.reason)
    for variant in (by_trial, live):
        assert variant.measurement is not None and len(variant.measurement.rates) == 2, variant.reason
        stop = "settled after 2 windows: no win (even its 95% interval stays under the best +3%)"
        assert f"{variant.label}: {stop}" in said, said
        assert variant.measurement.stopped == stop, "the reason stays with the result, for the report and JSON"
        assert variant.to_dict()["measurement"]["stopped"] == stop
        assert stop in result_text(variant)


DEMO = [
    sys.executable, "-m", "gpumon_demo", "--duration", "300", "--device", "cpu", "--progress-interval", "0",
    "--dataset-size", "20000", "--batch-size", "8",
]  # fmt: skip


def count_starts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    starts: list[list[str]] = []
    original_start = LaunchedJob.start

    def counted_start(self):  # type: ignore[no-untyped-def]
        starts.append(list(self.command))
        return original_start(self)

    monkeypatch.setattr(LaunchedJob, "start", counted_start)
    return starts


def live_trials(sampled) -> TrialRunner:  # type: ignore[no-untyped-def]
    return runner(
        DEMO, sampled, window_s=1.0, repeats=3, min_repeats=2, live_on_trial=True, live_warmup_s=0.5,
        live_apply_timeout_s=20.0,
    )  # fmt: skip


def test_the_guided_demo_changes_knobs_on_the_running_trial(  # type: ignore[no-untyped-def]
    sock_dir: str, sampled, monkeypatch: pytest.MonkeyPatch
) -> None:
    """live_on_trial: DataLoader knobs go through the hook of the trial already running (the demo starts its next
    pass over the data at once), the trainer's own knobs through its GPUMON_KNOBS_LIVE requests (a new DataLoader
    for another batch size), so 4 variants and the baseline take 2 process starts, not 5; a knob the trainer reads
    only at start (augment_in_workers) still gets a fresh run."""
    from gpumon.advisor.guided import GuidedRun

    starts = count_starts(monkeypatch)
    trials = live_trials(sampled)
    only = [
        Experiment({"num_workers": 2}, previous={"num_workers": 0}),
        Experiment({"batch_size": 16}, previous={"batch_size": 8}),
        Experiment({"log_every": 50}, previous={"log_every": 1}),
        Experiment({"augment_in_workers": False}, previous={"augment_in_workers": True}),
    ]
    report = GuidedRun(trials, only=only).run()
    assert report.baseline.ok, report.baseline.reason
    assert list(report.baseline.phases) == ["start", "warmup", "measure", "after"]
    assert all(seconds >= 0 for seconds in report.baseline.phases.values()) and report.baseline.phases["measure"] > 0
    variants = {v.label: v for v in report.variants}
    assert [v.kind for v in report.variants] == ["live", "live", "live", "trial"], [
        (v.label, v.reason) for v in report.variants
    ]
    workers = variants["num_workers 0 -> 2"]
    assert workers.status == OK and workers.applied == {"num_workers": "hook"}, workers.reason
    assert workers.pid == report.baseline.pid, "measured on the baseline's own process"
    assert workers.signals is not None and workers.signals.loader.num_workers == 2, "in effect before it was measured"
    assert workers.measurement is not None and 2 <= len(workers.measurement.rates) <= 3
    batch = variants["batch_size 8 -> 16"]
    assert batch.status == OK and batch.applied == {"batch_size": "script"}, batch.reason
    assert batch.pid == report.baseline.pid, "the trainer made a new DataLoader in-process"
    assert list(batch.phases) == ["apply", "warmup", "measure", "after"] and batch.phases["measure"] > 0
    assert batch.signals is not None and batch.signals.loader.batch_size == 16, "the hook saw the new loader's batches"
    assert batch.signals.loader.num_workers == (2 if workers.kept else 0), "the new loader has the hook's worker count"
    logging_change = variants["log_every 1 -> 50"]
    assert logging_change.status == OK and logging_change.applied == {"log_every": "script"}, logging_change.reason
    assert logging_change.pid == report.baseline.pid
    in_workers = variants["augment_in_workers on -> off"]
    assert in_workers.pid != report.baseline.pid, "read only at start: a fresh run"
    assert len(starts) == trials.runs == 2 == report.meta["trial_starts"]
    assert group_gone(report.baseline.pid) and group_gone(in_workers.pid), "all stopped"


def test_a_losing_or_refused_script_change_is_rolled_back_before_the_next_is_measured(  # type: ignore[no-untyped-def]
    sock_dir: str, sampled, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing can win (min_gain 100x): the batch size the trainer refuses and the one that loses are both undone
    on the running trial, and the next variant is measured at the batch size the trial started with."""
    from gpumon.advisor.guided import GuidedRun

    starts = count_starts(monkeypatch)
    trials = live_trials(sampled)
    only = [
        Experiment({"batch_size": 30000}, previous={"batch_size": 8}),
        Experiment({"batch_size": 16}, previous={"batch_size": 8}),
        Experiment({"log_every": 50}, previous={"log_every": 1}),
    ]
    report = GuidedRun(trials, only=only, min_gain=100.0).run()
    assert report.baseline.ok, report.baseline.reason
    refused, bigger, logging_change = report.variants
    assert refused.status == FAILED and "dataset size 20000" in refused.reason, refused.reason
    assert bigger.status == OK and not bigger.kept and bigger.signals is not None, bigger.reason
    assert bigger.signals.loader.batch_size == 16
    assert logging_change.status == OK and logging_change.signals is not None, logging_change.reason
    rolled_back = logging_change.signals.loader.batch_size
    assert rolled_back == 8, "the losing batch size was rolled back before this was measured"
    assert {v.pid for v in report.variants} == {report.baseline.pid} and len(starts) == 1
