"""Outside strings never reach the terminal raw: a replay of a recording with hostile names, the job pane fed hostile
hook messages, the job picker, `gpumon jobs` (a real hooked job started with a hostile argv and cwd), its JSON, and
`gpumon snapshot`'s text. Each shows the escape visibly (`\\x1b`) and sends no raw ESC, BEL, C1 or bidi override."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult

from gpumon.jobs.job_info import JobInfo, group_jobs
from gpumon.jobs.jobstate import replay_messages
from gpumon.sampling.recording import RecordingWriter, read_recording
from gpumon.sampling.replay import Replayer
from gpumon.sampling.snapshot import DiskSample
from gpumon.sampling.summary import describe_snapshot
from gpumon.tui.app import GpumonApp
from gpumon.tui.job_pane import JobPane
from tests.attach.attach_helpers import job_env, wait_until
from tests.tui.tui_support import gpu, process, snapshot

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202e[bold]x[/bold]"
"""Sets a terminal's title, clears the screen, a C1 CSI, a bidi override, and Rich markup."""
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "job-cpu-run.jsonl"
REPO_ROOT = Path(__file__).resolve().parents[2]


def assert_shown_escaped(screen: str) -> None:
    """No raw control byte or bidi override reaches the screen; the escape sequence is shown as text instead."""
    for raw in RAW:
        assert raw not in screen, f"raw {raw!r} on screen"
    assert "\\x1b]0;PWNED" in screen
    assert "[bold]" in screen  # markup shown literally, never applied


# ---------------------------------------------------------------------------------------------
# The dashboard replaying a hostile recording.


def hostile_snapshots() -> list[Any]:
    worker = process(4243, command=f"python {HOSTILE} worker", user=HOSTILE)
    job = process(
        4242,
        command=f"python {HOSTILE} train.py",
        user=HOSTILE,
        gpu_indices=(0,),
        gpu_memory=2 << 30,
        children=(worker,),
    )
    base = snapshot(
        hostname=f"host{HOSTILE}",
        driver_version=f"580{HOSTILE}",
        gpus=(gpu(0, name=f"NVIDIA {HOSTILE}", throttle_reasons=(f"power{HOSTILE}",)),),
        disks=(
            DiskSample(name=f"d{HOSTILE}", read_bytes_per_s=1e6, write_bytes_per_s=0.0, read_iops=10.0, write_iops=0.0),
        ),
        processes=(job,),
    )
    return [replace(base, timestamp=base.timestamp + index) for index in range(3)]


@pytest.fixture
def hostile_recording() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="gpumon-hostile-"))
    path = directory / f"run{HOSTILE.replace('/', '_')}.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream)
        for item in hostile_snapshots():
            writer.write(item)
    yield path
    shutil.rmtree(directory, ignore_errors=True)


async def test_a_replayed_hostile_recording_is_shown_escaped_in_every_pane(hostile_recording: Path) -> None:
    snapshots = read_recording(hostile_recording)
    assert snapshots[0].processes[0].command == f"python {HOSTILE} train.py"  # the recording kept the bytes
    source = Replayer(snapshots, speed=32, name=hostile_recording.name)
    app = GpumonApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if source.finished and app.snapshot is snapshots[-1]:
                break
        assert app.snapshot is snapshots[-1]
        screen = app.export_screenshot()
    assert_shown_escaped(screen)
    for shown in ("host\\x1b", "580\\x1b", "train.py", "power\\x1b", "d\\x1b"):
        assert shown in screen.replace("&#160;", " "), shown


# ---------------------------------------------------------------------------------------------
# The job pane, fed hostile hook messages through a real JobState.


def hostile_messages() -> list[dict[str, Any]]:
    messages = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for message in messages:
        if message["type"] == "hello":
            message["argv"] = ["train.py", HOSTILE]
            message["cwd"] = f"/tmp/{HOSTILE}"
        if message["type"] == "state":
            message["step_source"] = f"opt{HOSTILE}"
            for loader in message["dataloaders"]:
                loader["dataset"] = f"Data{HOSTILE}"
            message["precision"]["autocast"] = {"enabled": True, "dtype": f"torch.{HOSTILE}", "device_type": HOSTILE}
        if message["type"] == "bye":
            message["reason"] = f"gone{HOSTILE}"
    return messages


class PaneHost(App[None]):
    CSS = "JobPane { border-top: solid $primary; }"

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        super().__init__()
        self.messages = messages

    def compose(self) -> ComposeResult:
        pane = JobPane(id="job")
        pane.max_lines = 14
        yield pane

    def on_mount(self) -> None:
        self.query_one(JobPane).show(replay_messages(self.messages).view())


@pytest.mark.parametrize("ended", [False, True])
async def test_hostile_hook_messages_are_shown_escaped_in_the_job_pane(ended: bool) -> None:
    messages = hostile_messages()
    if not ended:
        messages = [message for message in messages if message["type"] != "bye"][: len(messages) // 2]
    app = PaneHost(messages)
    async with app.run_test(size=(160, 20)) as pilot:
        await pilot.pause()
        screen = app.export_screenshot()
    assert_shown_escaped(screen)
    assert "Data\\x1b" in screen and "opt\\x1b" in screen and "\\u202e" in screen
    assert ("gone\\x1b" in screen) is ended


# ---------------------------------------------------------------------------------------------
# The job picker.


async def test_the_job_picker_shows_a_hostile_argv_and_cwd_escaped(hostile_recording: Path) -> None:
    hello = {"pid": 4242, "argv": ["python", HOSTILE], "cwd": f"/srv/{HOSTILE}", "protocol": 1}
    groups = group_jobs([JobInfo.of(4242, "/nonexistent.sock", hello)])
    app = GpumonApp(Replayer(read_recording(hostile_recording), speed=32), jobs=groups)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        screen = app.export_screenshot()
    assert_shown_escaped(screen)
    assert "/srv/\\x1b" in screen


# ---------------------------------------------------------------------------------------------
# The command line: a real hooked job with a hostile argv and working directory.


@pytest.fixture
def hostile_job() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    base = tempfile.mkdtemp(prefix="gpumon-escapes-", dir="/tmp")
    sock_dir = os.path.join(base, "s")
    os.mkdir(sock_dir, 0o700)
    cwd = os.path.join(base, f"cwd{HOSTILE.replace('/', '_')}")
    os.mkdir(cwd)
    code = "import gpumon.hook, torch, time\nprint('ready', flush=True)\ntime.sleep(60)"
    job = subprocess.Popen(
        [sys.executable, "-c", code, HOSTILE],
        cwd=cwd,
        env=job_env(sock_dir),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "ready"
        assert wait_until(lambda: os.path.exists(os.path.join(sock_dir, f"{job.pid}.sock")), 30)
        yield sock_dir, job
    finally:
        job.kill()
        job.wait()
        if job.stdout is not None:
            job.stdout.close()
        shutil.rmtree(base, ignore_errors=True)


def gpumon(sock_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=job_env(sock_dir),
        cwd=REPO_ROOT,
    )


def test_gpumon_jobs_prints_a_hostile_argv_and_cwd_escaped(hostile_job: tuple[str, subprocess.Popen[str]]) -> None:
    sock_dir, job = hostile_job
    result = gpumon(sock_dir, "jobs")
    assert result.returncode == 0, result.stderr
    assert f"pid {job.pid}" in result.stdout
    assert_shown_escaped(result.stdout)
    assert "cwd\\x1b" in result.stdout


def test_gpumon_jobs_json_escapes_controls_and_keeps_the_exact_strings(
    hostile_job: tuple[str, subprocess.Popen[str]],
) -> None:
    sock_dir, job = hostile_job
    result = gpumon(sock_dir, "jobs", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii()  # ensure_ascii: every control and non-ASCII character is a \u escape
    for raw in RAW:
        assert raw not in result.stdout
    (group,) = [json.loads(line) for line in result.stdout.splitlines()]
    (hello,) = group["jobs"]
    assert hello["pid"] == job.pid and hello["argv"][-1] == HOSTILE and hello["cwd"].endswith(HOSTILE.replace("/", "_"))


def test_gpumon_attach_json_escapes_controls(hostile_job: tuple[str, subprocess.Popen[str]]) -> None:
    sock_dir, job = hostile_job
    result = gpumon(sock_dir, "attach", str(job.pid), "--json", "--duration", "1.5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.isascii()
    hello = json.loads(result.stdout.splitlines()[0])
    assert hello["argv"][-1] == HOSTILE


# ---------------------------------------------------------------------------------------------
# gpumon snapshot's text.


def test_the_snapshot_text_shows_hostile_names_escaped() -> None:
    text = describe_snapshot(hostile_snapshots()[0])
    assert_shown_escaped(text)
    gpu_error = describe_snapshot(replace(hostile_snapshots()[0], gpus=(), gpu_error=HOSTILE))
    assert_shown_escaped(gpu_error)
