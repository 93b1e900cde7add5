"""On a GPU: the demo's DataLoader knobs tried live on its running CUDA trial (one process start for the baseline and
two variants), each in effect before it is measured; pin_memory makes the demo's copies non-blocking."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpumon import protocol
from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun
from gpumon.advisor.results import OK
from gpumon.advisor.session import sampling
from gpumon.advisor.trial import TrialRunner

REPO = Path(__file__).resolve().parents[2]


def test_dataloader_knobs_go_live_on_the_running_cuda_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, str(tmp_path / "sockets"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop(protocol.KNOBS_ENV, None)
    workers = min(8, max(2, (os.cpu_count() or 4) - 2))
    demo = [sys.executable, "-m", "gpumon_demo", "--duration", "600", "--device", "cuda", "--progress-interval", "0"]
    with sampling() as (sampler, log):
        runner = TrialRunner(
            demo, log=log, track=sampler.track_pids, cwd=str(REPO), base_env=env, warmup_s=5.0, window_s=3.0,
            repeats=5, min_repeats=2, live_on_trial=True, sync_diagnosis=False,
        )  # fmt: skip
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
    assert workers_row.status == OK and workers_row.signals is not None and workers_row.signals.num_workers == workers
    assert workers_row.kept, f"{workers} workers beat none on the demo: {workers_row.measurement}"
    assert pin_row.status == OK and pin_row.signals is not None and pin_row.signals.pin_memory is True
    for row in (workers_row, pin_row):
        assert row.measurement is not None and 2 <= len(row.measurement.rates) <= 5
    print(
        f"baseline {report.baseline.measurement}; {[(v.label, v.measurement, v.kept) for v in report.variants]}; "
        f"{report.meta['wall_s']} s"
    )
