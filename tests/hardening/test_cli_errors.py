"""Bad input to the real `gpumon` entry (python -m gpumon): one line on stderr, exit 2, no traceback, and nothing
written before the input was checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_record_into_a_directory_it_cannot_search_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The existence check raised PermissionError (a traceback). Root searches any directory, so
    the refusal is played by the one call that met it."""
    from gpumon.cli import main

    target = tmp_path / "locked" / "x.jsonl"
    real_lstat = os.lstat

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(path) == target:
            raise PermissionError(13, "Permission denied", str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    assert main(["record", str(target), "--duration", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpumon: error: cannot write {target}: Permission denied"]


def gpumon_to(stdout: int, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpumon args` with its stdout on the descriptor `stdout` (-1: closed, as `>&-`)."""
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        stdout=None if stdout < 0 else stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        cwd=REPO,
        # the shell's `>&-`: close descriptor 1 in the child just before exec
        preexec_fn=(lambda: os.close(1)) if stdout < 0 else None,
    )


OUTPUT_COMMANDS = [["snapshot", "--json"], ["jobs"], ["--help"], ["snapshot"]]


@pytest.mark.parametrize("args", OUTPUT_COMMANDS, ids=lambda args: " ".join(args))
def test_a_reader_that_left_is_a_quiet_exit_141(args: list[str]) -> None:
    """`gpumon snapshot --json | head -c 10` was a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has gone before anything is written: every write is EPIPE
    try:
        done = gpumon_to(write_end, *args)
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", OUTPUT_COMMANDS, ids=lambda args: " ".join(args))
def test_output_to_a_full_disk_is_one_line(args: list[str]) -> None:
    """`gpumon jobs > /dev/full` was an OSError traceback."""
    with open("/dev/full", "w") as full:
        done = gpumon_to(full.fileno(), *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == ["gpumon: error: cannot write output: No space left on device"]


@pytest.mark.parametrize("args", [["snapshot", "--json"], ["jobs"]], ids=lambda args: " ".join(args))
def test_a_closed_stdout_is_one_line(args: list[str]) -> None:
    """`gpumon snapshot --json >&-` was an AttributeError traceback (sys.stdout is None)."""
    done = gpumon_to(-1, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == ["gpumon: error: cannot write output: standard output is closed"]


@pytest.mark.parametrize(
    "bad",
    [["--markdown", "/nonexistent-gpumon-dir/report.md"], ["--markdown", "."], ["--try", "num_workers=abc"]],
    ids=["markdown-no-directory", "markdown-a-directory", "try-bad-value"],
)
def test_experiment_checks_markdown_and_tries_before_anything_runs(tmp_path: Path, bad: list[str]) -> None:
    """A bad --markdown path was found after the whole run (the results lost), a bad --try value
    after the baseline had run."""
    marker = tmp_path / "ran"
    done = gpumon("experiment", *bad, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert_one_line_exit_2(done, bad[0])
    assert not marker.exists(), "the command ran before the arguments were checked"


def test_demo_guided_checks_markdown_before_anything_runs() -> None:
    done = gpumon("demo", "--guided", "--markdown", "/nonexistent-gpumon-dir/report.md", timeout=30)
    assert_one_line_exit_2(done, "--markdown", "/nonexistent-gpumon-dir")


def test_run_without_a_command_leaves_no_log_file(tmp_path: Path) -> None:
    """`gpumon run` with no command made an empty /tmp/gpumon-run-*.log before refusing."""
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert_one_line_exit_2(done, "needs a command")
    assert list(tmp_path.iterdir()) == []
