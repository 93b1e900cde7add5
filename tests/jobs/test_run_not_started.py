"""`gpumon run` with a command that cannot start: one line, a shell's exit status (127 not found, 126 not
runnable), and no log file left behind; `--log` with `--no-tui` is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]


def gpumon(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m gpumon ARGS` with its temporary files under tmp_path/tmp."""
    temporary = tmp_path / "tmp"
    temporary.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": str(REPOSITORY), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("tui", [True, False], ids=["dashboard", "no-tui"])
def test_a_missing_command_is_127_and_leaves_no_log(tmp_path: Path, tui: bool) -> None:
    result = gpumon(tmp_path, "run", *([] if tui else ["--no-tui"]), "--", "/nonexistent/cmd")
    assert result.returncode == 127
    assert one_line(result) == "gpumon: error: command not found: /nonexistent/cmd"
    assert list((tmp_path / "tmp").iterdir()) == [], "no /tmp/gpumon-run-*.log left behind"


def test_a_log_asked_for_is_not_left_behind_by_a_command_that_never_started(tmp_path: Path) -> None:
    result = gpumon(tmp_path, "run", "--log", "job.log", "--", "/nonexistent/cmd")
    assert result.returncode == 127, result.stderr
    assert not (tmp_path / "job.log").exists()


def test_an_existing_log_is_kept_when_the_command_never_started(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("an earlier run\n")
    result = gpumon(tmp_path, "run", "--log", str(log), "--", "/nonexistent/cmd")
    assert result.returncode == 127, result.stderr
    assert log.exists(), "a file that was there is the user's: emptied by the open, never removed"


def test_a_file_that_is_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    result = gpumon(tmp_path, "run", "--no-tui", "--", str(script))
    assert result.returncode == 126
    assert one_line(result) == f"gpumon: error: permission denied: {script}"


@pytest.mark.parametrize("log", ["/nonexistent/x.log", "ok.log"])
def test_log_with_no_tui_is_refused_in_one_line(tmp_path: Path, log: str) -> None:
    result = gpumon(tmp_path, "run", "--no-tui", "--log", log, "--", "true")
    assert result.returncode == 2
    assert "--log goes with the dashboard" in one_line(result)
    assert not (tmp_path / "ok.log").exists()
