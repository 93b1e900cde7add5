"""A pid gpumon cannot see a hook of is named for what it is: gone ("no process with pid N"), or another user's
("pid N belongs to user X: ..."), never "has no gpumon hook"; experiment --pid and profile need the hook, attach and
diagnose could use py-spy instead."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
NOBODY = 65534
AS_NOBODY = """
import encodings.ascii, encodings.latin_1, encodings.utf_8, os, pwd, sys
import gpumon.advisor.session, gpumon.cli, gpumon.cli.profile, gpumon.jobs.client, gpumon.jobs.session
from gpumon.cli import main
os.setresgid(NOBODY, NOBODY, 0)
os.setresuid(NOBODY, NOBODY, 0)  # every module imported first: nobody cannot read root's Python
sys.exit(main(sys.argv[1:]))
""".replace("NOBODY", str(NOBODY))


def gpumon(*args: str, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    prefix = ["-c", AS_NOBODY] if as_nobody else ["-m", "gpumon"]
    return subprocess.run(
        [sys.executable, *prefix, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(REPOSITORY), "XDG_STATE_HOME": "/nonexistent"},
    )


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def roots_process() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["experiment", "--pid"], ["profile"], ["attach"]])
def test_a_dead_pid_is_no_process(command: list[str]) -> None:
    pid = dead_pid()
    assert one_error(gpumon(*command, str(pid))) == f"gpumon: error: no process with pid {pid}"


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
@pytest.mark.parametrize("command", [["experiment", "--pid"], ["profile"]])
def test_another_users_job_is_named_as_theirs(roots_process: int, command: list[str]) -> None:
    line = one_error(gpumon(*command, str(roots_process), as_nobody=True))
    assert line == (
        f"gpumon: error: pid {roots_process} belongs to user root: gpumon sees only your own jobs' sockets "
        "(run as that user or root)"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
@pytest.mark.parametrize("command", [["attach"], ["diagnose", "--pid"]])
def test_attaching_to_another_users_job_says_only_its_owner_or_root_can_watch_it(
    roots_process: int, command: list[str]
) -> None:
    """Without the hook, attach and diagnose would read the job with py-spy, which may not read another user's."""
    line = one_error(gpumon(*command, str(roots_process), as_nobody=True))
    assert line.startswith(f"gpumon: error: pid {roots_process} belongs to root: only its owner or root can watch it")
