"""On a GPU: the demo's DataLoader knobs tried live on its running CUDA trial (one process start for the baseline and
two variants), each in effect before it is measured; pin_memory makes the demo's copies non-blocking; the trainer's
own knobs (bf16, channels_last, batch size) changed in-process measure what a fresh trial does."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gpumon import protocol
from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun
from gpumon.advisor.measure import beats
from gpumon.advisor.results import OK
from gpumon.advisor.session import sampling
from gpumon.advisor.trial import TrialRunner
from gpumon.jobs.launch import LaunchedJob

REPO = Path(__file__).resolve().parents[2]
DEMO = [sys.executable, "-m", "gpumon_demo", "--duration", "600", "--device", "cuda", "--progress-interval", "0"]


def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a demo trial: this checkout's gpumon, no knobs left from the caller, sockets in tmp_path."""
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, str(tmp_path / "sockets"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop(protocol.KNOBS_ENV, None)
    return env


def demo_trial_runner(env: dict[str, str], log: Any, track: Any, live_on_trial: bool = True) -> TrialRunner:
    """A runner of demo trials (live knobs unless told), the guided run's windows (3 s, 2 to 5 of them after 5 s)."""
    return TrialRunner(
        DEMO, launcher=LaunchedJob, log=log, track=track, cwd=str(REPO), base_env=env, warmup_s=5.0, window_s=3.0,
        repeats=5, min_repeats=2, live_on_trial=live_on_trial, sync_diagnosis=False,
    )  # fmt: skip


def test_dataloader_knobs_go_live_on_the_running_cuda_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = demo_env(tmp_path, monkeypatch)
    workers = min(8, max(2, (os.cpu_count() or 4) - 2))
    with sampling() as (sampler, log):
        runner = demo_trial_runner(env, log, sampler.track_pids)
        only = [
            Experiment({"num_workers": workers}, previous={"num_workers": 0}),
            Experiment({"pin_memory": True}, previous={"pin_memory": False}),
        ]
        report = GuidedRun(runner, only=only).run()
    assert report.baseline.status == OK, report.baseline.reason
    rows = [(v.label, v.status, v.reason) for v in report.variants]
    assert [v.kind for v in report.variants] == ["live", "live"], rows
    assert runner.runs == 1, "the baseline's process served both variants"
    workers_row, pin_row = report.variants
    assert workers_row.status == OK and workers_row.signals is not None
    assert workers_row.signals.loader.num_workers == workers
    assert workers_row.kept, f"{workers} workers beat none on the demo: {workers_row.measurement}"
    assert pin_row.status == OK and pin_row.signals is not None and pin_row.signals.loader.pin_memory is True
    for row in (workers_row, pin_row):
        assert row.measurement is not None and 2 <= len(row.measurement.rates) <= 5
    print(
        f"baseline {report.baseline.measurement}; {[(v.label, v.measurement, v.kept) for v in report.variants]}; "
        f"{report.meta['wall_s']} s"
    )


def test_the_demos_own_knobs_go_live_on_the_running_cuda_trial_and_measure_what_a_fresh_run_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bf16, channels_last and batch 256 asked of the demo trainer (GPUMON_KNOBS_LIVE) on its running CUDA trial: one
    process start; each change's peak memory is its own (bf16 lower, batch 256 higher); and the kept settings
    measured live and in a fresh trial agree: neither beats the other by the guided run's own rule (3% and the
    noise of both)."""
    env = demo_env(tmp_path, monkeypatch)
    workers = min(14, max(2, (os.cpu_count() or 4) - 2))
    with sampling() as (sampler, log):
        runner = demo_trial_runner(env, log, sampler.track_pids)
        only = [
            Experiment({"num_workers": workers}, previous={"num_workers": 0}),
            Experiment({"amp_bf16": True}, previous={"amp_bf16": False}),
            Experiment({"channels_last": True}, previous={"channels_last": False}),
            Experiment({"batch_size": 256}, previous={"batch_size": 32}),
        ]
        report = GuidedRun(runner, only=only).run()
        rows = [(v.label, v.status, v.reason) for v in report.variants]
        assert report.baseline.status == OK and all(v.status == OK for v in report.variants), rows
        assert [v.kind for v in report.variants] == ["live"] * 4 and runner.runs == 1, rows
        batch_row = report.variants[-1]
        assert [v.applied for v in report.variants[1:]] == [
            {"amp_bf16": "script"}, {"channels_last": "script"}, {"batch_size": "script"}
        ]  # fmt: skip
        peaks = [v.measurement.peak_memory if v.measurement else None for v in report.variants]
        assert all(peak is not None for peak in peaks), peaks
        assert peaks[1] < peaks[0] and peaks[3] > peaks[2], f"each change's own peak (reset when applied): {peaks}"
        assert batch_row.signals is not None and batch_row.signals.loader.batch_size == 256
        assert report.best is batch_row, f"batch 256 won, as in every H200 ladder: {rows}"
        live = batch_row.measurement
        fresh_runner = demo_trial_runner(env, log, sampler.track_pids, live_on_trial=False)
        try:
            fresh = fresh_runner.run(Experiment(dict(report.kept)), {})
        finally:
            fresh_runner.finish(report.kept)
    assert fresh.status == OK and fresh.measurement is not None and live is not None, fresh.reason
    agree = not beats(live, fresh.measurement) and not beats(fresh.measurement, live)
    print(f"live {live.rate:.0f} ±{live.noise:.1%}, fresh {fresh.measurement.rate:.0f} ±{fresh.measurement.noise:.1%}")
    assert agree, f"live {live} against a fresh trial {fresh.measurement}"
