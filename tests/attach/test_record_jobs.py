"""`gpumon record` beside real hooked CPU jobs: the job data goes into the recording, bounded, and comes back in
`gpumon replay` (job pane, finding) and `exporter --replay` (gpumon_job_* families); older recordings still replay."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from attach_helpers import HOOKED_JOB, REPO_ROOT, Job

from gpumon import protocol
from gpumon.advisor.categories import HEADLINES
from gpumon.jobs.recorded import JOB_DATA_VERSION, RecordedJobs
from gpumon.sampling.recording import JOB_DATA_VERSIONS, RecordingWriter, iter_samples, read_recording
from gpumon.sampling.replay import Replayer
from tests.exporter.exporter_helpers import running_exporter, samples, scrape, wait_until

RECORD_S = 5
FAST_JOB_BYTES_PER_S = 16_000
"""A recording beside one job stepping hundreds of times a second stays under this, at one sample a second (the
GPU-less snapshots of this box are about 2 KB of it)."""


def gpumon(*args: str, sock_dir: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, protocol.SOCKET_DIR_ENV: sock_dir}
    command = [sys.executable, "-m", "gpumon", *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def record_beside(job_args: list[str], directory: Path) -> tuple[Path, Job]:
    """A RECORD_S-second recording made beside a hooked job started with `job_args` (the job keeps running)."""
    sock_dir = directory / "s"
    sock_dir.mkdir(mode=0o700)
    job = Job(HOOKED_JOB, job_args, str(sock_dir))
    job.event("ready")
    path = directory / "run.jsonl"
    result = gpumon("record", str(path), "--duration", str(RECORD_S), sock_dir=str(sock_dir))
    assert result.returncode == 0, result.stderr
    return path, job


@pytest.fixture(scope="module")
def slow_recording() -> Iterator[tuple[Path, Job]]:
    """A recording beside a job whose DataLoader makes it input-bound (8 ms of data wait a step)."""
    directory = Path(tempfile.mkdtemp(prefix="gpumon-record-jobs-", dir="/tmp"))
    path, job = record_beside(["--seconds", "60", "--item-sleep-ms", "1"], directory)
    try:
        yield path, job
    finally:
        job.kill()
        shutil.rmtree(directory, ignore_errors=True)


def replayed(path: Path) -> RecordedJobs:
    """The recording's jobs as a replay leaves them at its end."""
    recorded = RecordedJobs()
    replayer = Replayer(iter_samples(path))
    replayer.on_jobs.append(recorded.add)
    while replayer.step() is not None:
        pass
    return recorded


def screen_text(svg: str) -> str:
    text = "".join(re.findall(r"<text[^>]*>(.*?)</text>", svg))
    return html.unescape(text).replace("\xa0", " ")


def test_the_recording_is_private_and_names_its_job_data_format(slow_recording: tuple[Path, Job]) -> None:
    path, job = slow_recording
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    header = json.loads(path.read_text().splitlines()[0])
    assert header["job_data"] == JOB_DATA_VERSION in JOB_DATA_VERSIONS
    entries = [entry for sample in iter_samples(path) for entry in sample.jobs]
    assert {entry["pid"] for entry in entries} == {job.pid}
    assert entries[0]["messages"][0]["type"] == protocol.HELLO


def test_the_replayed_job_holds_its_steps_budget_stack_samples_and_finding(slow_recording: tuple[Path, Job]) -> None:
    path, job = slow_recording
    recorded = replayed(path)
    source = recorded.first_job()
    assert source is not None and source.pid == job.pid
    view = source.view()
    assert view.info is not None and "hooked_train.py" in view.command
    assert view.stats.steps_per_s is not None and view.stats.steps_per_s > 10
    assert view.stats.breakdown.data is not None and view.stats.breakdown.data > 0.5  # 8 ms of data wait a step
    assert view.budget.steps > 0 and view.budget.data_worker is not None
    assert len(view.host_profiles) >= RECORD_S - 2  # one state a second, the step model's input
    assert len(view.timeline) >= RECORD_S - 2 and sum(point.steps for point in view.timeline) > 50
    assert view.last_seq >= sum(sums.steps for sums in view.step_sums)
    finding = source.finding()
    assert finding is not None and finding["category"] == "input_bound"


def test_replay_shows_the_job_pane_and_the_finding(slow_recording: tuple[Path, Job], tmp_path: Path) -> None:
    path, job = slow_recording
    svg = tmp_path / "screen.svg"
    result = gpumon("replay", str(path), "--screenshot", str(svg), sock_dir=str(tmp_path))
    assert result.returncode == 0, result.stderr
    screen = screen_text(svg.read_text())
    assert f"Job {job.pid}" in screen and "hooked_train.py" in screen
    for line in ("Step ", "Budget ", "Rate ", "steps/s"):
        assert line in screen
    assert HEADLINES["input_bound"] in screen and "input_bound" in screen
    assert "waiting for the first training step" not in screen


def test_exporter_replay_serves_the_job_families(slow_recording: tuple[Path, Job]) -> None:
    path, job = slow_recording
    with running_exporter("--replay", str(path), "--speed", "8") as exporter:

        def served() -> bool:
            return "gpumon_job_finding{" in scrape(exporter.url)

        wait_until(served, 30, "the recorded job's finding exported")
        found = samples(scrape(exporter.url))
    for family in ("gpumon_job_steps_per_second", "gpumon_job_data_wait_ratio", "gpumon_job_steps_total"):
        assert [labels["pid"] for labels, _value in found[family]] == [str(job.pid)], family
    (labels, confidence), *_ = found["gpumon_job_finding"]
    assert labels["category"] == "input_bound" and 0 < confidence <= 1
    assert found["gpumon_job_data_wait_ratio"][0][1] > 0.5


def test_a_fast_job_keeps_the_recording_small(tmp_path: Path) -> None:
    path, job = record_beside(["--seconds", "60", "--item-sleep-ms", "0", "--batch", "1"], tmp_path)
    try:
        view = replayed(path).views()[0]
    finally:
        job.kill()
    written = sum(len(entry["messages"]) for sample in iter_samples(path) for entry in sample.jobs)
    steps = sum(sums.steps for sums in view.step_sums)
    assert steps > 20 * RECORD_S * 10, "the job is not fast enough to show the bound"
    records = sum(
        len(message.get("records", []))
        for sample in iter_samples(path)
        for entry in sample.jobs
        for message in entry["messages"]
    )
    assert records < steps / 5 and written > 0
    assert path.stat().st_size / RECORD_S < FAST_JOB_BYTES_PER_S
    assert view.stats.steps_per_s is not None and view.stats.steps_per_s > 100  # the recorded rate, not the records'


def _write(path: Path, job_data: int | None, jobs: list[dict[str, object]]) -> None:
    snapshots = read_recording(REPO_ROOT / "assets" / "recordings" / "h100-demo-slow.jsonl")[:3]
    with path.open("w") as stream:
        writer = RecordingWriter(stream, job_data=job_data)
        for snapshot in snapshots:
            writer.write(snapshot, jobs)


def test_a_recording_without_job_data_still_replays(tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    _write(old, None, [])
    assert "job_data" not in json.loads(old.read_text().splitlines()[0])
    assert all(sample.jobs == () for sample in iter_samples(old))
    svg = tmp_path / "old.svg"
    result = gpumon("replay", str(old), "--screenshot", str(svg), sock_dir=str(tmp_path))
    assert result.returncode == 0, result.stderr
    screen = screen_text(svg.read_text())
    assert "GPU" in screen and "Job " not in screen


def test_job_data_of_an_unknown_version_is_left_out_and_bad_entries_are_named(tmp_path: Path) -> None:
    newer = tmp_path / "newer.jsonl"
    _write(newer, JOB_DATA_VERSION + 1, [{"pid": 4242, "messages": []}])
    assert [len(sample.jobs) for sample in iter_samples(newer)] == [0, 0, 0]
    bad = tmp_path / "bad.jsonl"
    _write(bad, JOB_DATA_VERSION, [{"pid": "x"}])
    with pytest.raises(ValueError, match=r"line 2: jobs\[0\]\.pid: expected a pid"):
        list(iter_samples(bad))
