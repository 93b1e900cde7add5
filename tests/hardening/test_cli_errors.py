"""Bad input to the real `gpumon` entry (python -m gpumon): one line on stderr, exit 2, no traceback, and nothing
written before the input was checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def gpumon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def assert_one_line_exit_2(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and lines[0].startswith("gpumon")
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["attach", "99999999999999999999"],
        ["attach", "4294967296"],
        ["attach", "0"],
        ["attach", "-5"],
        ["diagnose", "--pid", "99999999999999999999"],
        ["experiment", "--pid", "4194305", "--", "python"],
    ],
    ids=["attach-huge", "attach-2^32", "attach-0", "attach-negative", "diagnose-huge", "experiment-above-pid-max"],
)
def test_pids_outside_the_kernels_range_are_refused(args: list[str]) -> None:
    assert_one_line_exit_2(gpumon(*args), "is not a process id")


@pytest.mark.parametrize("duration", ["1e308", "inf", "nan", "-1", "0", "1e9"])
def test_record_refuses_a_duration_before_writing_anything(tmp_path: Path, duration: str) -> None:
    path = tmp_path / "x.jsonl"
    assert_one_line_exit_2(gpumon("record", str(path), "--duration", duration), "--duration")
    assert not path.exists(), "nothing is written before the arguments are checked"


@pytest.mark.parametrize(
    "args",
    [
        ["attach", "1", "--json", "--duration", "1e308"],
        ["diagnose", "--duration", "inf"],
        ["snapshot", "--window", "1e308"],
        ["demo", "--duration", "1e400"],
    ],
)
def test_other_durations_are_checked_too(args: list[str]) -> None:
    assert_one_line_exit_2(gpumon(*args))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_record_to_a_full_disk_is_one_line() -> None:
    done = gpumon("record", "/dev/full", "--force", "--duration", "0.5", "--interval", "0.1")
    assert_one_line_exit_2(done, "cannot write /dev/full", "No space left on device")
