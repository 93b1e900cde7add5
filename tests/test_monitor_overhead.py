"""benchmarks/monitor_overhead.py's own bookkeeping: the bytes a tool writes to its terminal counted in the measured
window only, the CPU it burns there, and the argument checks (the benchmark's figures come from GPU runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.monitor_overhead import (
    BASE,
    REPLAY,
    BenchmarkError,
    measure_command,
    run_in_pty,
    stop_group,
    tool_command,
)

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "monitor_overhead.py"

BURST_THEN_TRICKLE = """
import os, sys, time
os.write(1, b"x" * 1_000_000)                # during the warm-up: must not be counted
while True:
    os.write(1, b"y" * 1_000)
    time.sleep(0.1)
"""


def test_every_byte_written_to_the_terminal_is_counted() -> None:
    process, master, output = run_in_pty([sys.executable, "-c", "import os; os.write(1, b'z' * 123_456)"], 80, 24)
    try:
        process.wait(10)
        assert output.reader is not None
        output.reader.join(10)
        assert output.bytes_read == 123_456
    finally:
        stop_group(process)
        os.close(master)


def test_the_bytes_and_cpu_of_the_warm_up_are_left_out() -> None:
    started = time.monotonic()
    measured = measure_command([sys.executable, "-c", BURST_THEN_TRICKLE], "trickle", 1.5, 2.0, 80, 24)
    assert time.monotonic() - started >= 3.5
    # About 10 kB/s in the window; with the warm-up's burst it would be over 500 kB/s.
    assert 2_000 < measured.bytes_per_s < 50_000
    assert 0.0 <= measured.cpu_percent < 50.0


def test_a_tool_that_exits_early_is_one_clear_error() -> None:
    try:
        measure_command([sys.executable, "-c", "raise SystemExit(3)"], "quitter", 1.0, 1.0, 80, 24)
    except BenchmarkError as error:
        assert str(error) == "quitter exited during its warm-up with code 3"
    else:
        raise AssertionError("no error for a tool that exited")


def test_fewer_than_three_rounds_are_refused_unless_allowed_in_one_line() -> None:
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "2"], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "monitor_overhead: --rounds 2: steady-state figures need at least 3 rounds (--allow-fewer for fewer)"
    ]
    missing = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--allow-fewer", "--replay", "/no/such/recording.jsonl"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "/no/such/recording.jsonl" in missing.stderr


def test_the_base_tool_runs_gpumon_from_the_base_checkout(tmp_path: Path) -> None:
    """`--base DIR`: `python -m gpumon` started in DIR imports DIR's gpumon, not this checkout's."""
    (tmp_path / "gpumon").mkdir()
    (tmp_path / "gpumon" / "__init__.py").write_text("")
    (tmp_path / "gpumon" / "__main__.py").write_text("import os\nos.write(1, os.getcwd().encode())\n")
    command = tool_command(BASE, 1.0)
    process, master, output = run_in_pty(command, 80, 24, cwd=tmp_path)
    try:
        process.wait(10)
        assert output.reader is not None
        output.reader.join(10)
        assert output.bytes_read == len(str(tmp_path).encode())
    finally:
        stop_group(process)
        os.close(master)


def test_a_base_without_a_gpumon_checkout_is_refused_in_one_line(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "--base", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"monitor_overhead: --base {tmp_path}: no gpumon checkout there (gpumon/__main__.py is missing)"
    ]


def test_with_a_replay_the_base_tool_replays_the_same_recording(tmp_path: Path) -> None:
    """`--base DIR --replay FILE`: the base checkout replays the recording at the same speed as this one."""
    recording = (tmp_path / "looped.jsonl", 1.0)
    base = tool_command(BASE, 0.25, recording)
    assert base == tool_command(REPLAY, 0.25, recording)
    assert base[-4:] == ["replay", str(tmp_path / "looped.jsonl"), "--speed", "4"]
