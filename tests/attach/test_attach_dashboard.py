"""The dashboard paths end to end, in a pseudo-terminal as a user runs them: `gpumon run`, `gpumon attach` (hooked
and py-spy), and plain `gpumon` offering a hooked job."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from attach_helpers import HOOKED_JOB, PtyProgram, group_alive, job_env, wait_until

from gpumon.jobs.pyspy.target import find_pyspy

GPUMON = [sys.executable, "-m", "gpumon"]


@pytest.fixture
def terminal(sock_dir: str) -> Any:
    """terminal(*args, sock_dir=None) runs gpumon in a pty; it looks for sockets in the test's directory or sock_dir."""
    programs: list[PtyProgram] = []

    def start(*args: str, sock_dir: str = sock_dir) -> PtyProgram:
        program = PtyProgram([*GPUMON, *args], job_env(sock_dir))
        programs.append(program)
        return program

    yield start
    for program in programs:
        program.close()


def test_run_shows_the_job_then_its_end_and_passes_its_status(terminal: Any, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    screen = terminal(
        "run",
        "--log",
        str(log),
        "--",
        sys.executable,
        str(HOOKED_JOB),
        "--no-import",
        "--seconds",
        "1.5",
        "--exit-code",
        "5",
    )
    assert screen.read_until(b"steps/s"), screen.output[-2000:]  # the job's first steps are on screen
    assert screen.read_until(b"job ended", timeout=30), screen.output[-2000:]
    screen.press(b"q")
    assert screen.wait() == 5
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "done" and events[-1]["hooked"] is True
    assert f"its output goes to {log}".encode() in screen.output


def test_quitting_run_stops_the_job_and_its_workers(terminal: Any, tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    screen = terminal(
        "run",
        "--log",
        str(log),
        "--",
        sys.executable,
        str(HOOKED_JOB),
        "--no-import",
        "--seconds",
        "60",
        "--workers",
        "2",
    )
    assert screen.read_until(b"steps/s"), screen.output[-2000:]
    job_pid = json.loads(next(line for line in log.read_text().splitlines() if '"ready"' in line))["pid"]
    screen.press(b"q")
    assert screen.wait() == 128 + signal.SIGINT  # the job got its Ctrl+C
    assert wait_until(lambda: not group_alive(job_pid), 10)


def test_attach_shows_a_hooked_job(terminal: Any, shared_hooked_job: Any) -> None:
    job = shared_hooked_job
    screen = terminal("attach", str(job.pid), sock_dir=job.sock_dir)
    assert screen.read_until(b"steps/s"), screen.output[-2000:]
    assert screen.shows(f"Job {job.pid}".encode())
    screen.press(b"q")
    assert screen.wait() == 0
    assert job.proc.poll() is None  # attaching and leaving does not disturb the job


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")
def test_attach_without_the_hook_shows_the_py_spy_estimate(terminal: Any, shared_spy_job: Any) -> None:
    job = shared_spy_job
    screen = terminal("attach", str(job.pid))
    if screen.read_until(b"permission denied", timeout=3):
        pytest.skip("py-spy cannot attach here")
    assert screen.read_until(b"waiting on DataLoader", timeout=20), screen.output[-2000:]
    assert screen.shows(b"estimate (py-spy, no hook)")
    screen.press(b"q")
    assert screen.wait() == 0
    assert job.proc.poll() is None


def test_plain_gpumon_offers_the_hooked_job_and_attaches_to_it(terminal: Any, shared_hooked_job: Any) -> None:
    screen = terminal(sock_dir=shared_hooked_job.sock_dir)
    assert screen.read_until(b"hooked training job"), screen.output[-2000:]
    screen.press(b"\r")
    assert screen.read_until(b"steps/s"), screen.output[-2000:]
    screen.press(b"q")
    assert screen.wait() == 0
