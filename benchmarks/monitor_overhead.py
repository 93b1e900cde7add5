"""CPU cost of the gpumon dashboard against nvitop, each running in a pseudo-terminal, side by side in one run.

Usage (on a GPU machine, from the project root):

    python benchmarks/monitor_overhead.py --intervals 1 0.25 --rounds 3 --window 20 --json out.json

For each interval it alternates gpumon and nvitop (round-robin, `--rounds` times), lets each warm up,
then reads the CPU time (user + system, the tool and its children) it spends over `--window` seconds
and reports it as a percentage of one core. A training load (benchmarks/training_load.py) runs the
whole time unless `--no-load` is given, so both tools have a GPU process and its workers to show.

Without a GPU, `--replay FILE` measures gpumon's dashboard alone (the TUI cost, no sampling), replaying a
recording made with `gpumon record` one snapshot per interval, repeated as long as the run needs:

    python benchmarks/monitor_overhead.py --replay assets/recordings/h100-training.jsonl --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fcntl
import json
import os
import pty
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumon.sampling.recording import RecordingError, RecordingWriter, read_recording

REPLAY = "gpumon-replay"
"""The tool name of gpumon's dashboard replaying a recording (`--replay`)."""


def tool_command(tool: str, interval: float, replay: tuple[Path, float] | None = None) -> list[str]:
    """The command line of a tool at an interval; for REPLAY, `replay` is (recording, its snapshot spacing in s)."""
    if tool == REPLAY:
        if replay is None:
            raise ValueError("the replay tool needs a recording")
        recording, spacing = replay
        return [sys.executable, "-m", "gpumon", "replay", str(recording), "--speed", f"{spacing / interval:g}"]
    if tool == "gpumon":
        return [sys.executable, "-m", "gpumon", "--interval", f"{interval:g}"]
    if tool == "nvitop":
        return [sys.executable, "-m", "nvitop", "--interval", f"{interval:g}"]
    raise ValueError(tool)


def run_in_pty(command: list[str], columns: int, rows: int) -> tuple[subprocess.Popen, int, threading.Thread]:
    """Start `command` on a fresh pseudo-terminal of the given size and drain its output in a thread."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, cwd=ROOT
    )
    os.close(slave)

    def drain() -> None:
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:
                break

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return process, master, reader


def tree_cpu_seconds(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def looped_recording(source: Path, seconds: float, interval: float, directory: Path) -> tuple[Path, float]:
    """`source` repeated (timestamps shifted) so that a replay at one snapshot per `interval` lasts `seconds`.

    Returns the new recording's path and the recording's mean snapshot spacing in seconds.
    """
    snapshots = read_recording(source)
    if len(snapshots) < 2:
        raise RecordingError(f"{source}: a replay benchmark needs at least two snapshots")
    first, last = snapshots[0].timestamp, snapshots[-1].timestamp
    spacing = (last - first) / (len(snapshots) - 1)
    if spacing <= 0:
        raise RecordingError(f"{source}: snapshot timestamps do not increase")
    repeats = -(-(int(seconds / interval) + 2) // len(snapshots))
    period = last - first + spacing
    looped = directory / f"{source.stem}-x{repeats}.jsonl"
    with looped.open("w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream, note=f"{source.name} repeated {repeats} times by monitor_overhead.py")
        for repeat in range(repeats):
            for snapshot in snapshots:
                writer.write(dataclasses.replace(snapshot, timestamp=snapshot.timestamp + repeat * period))
    return looped, spacing


def measure(
    tool: str,
    interval: float,
    warmup: float,
    window: float,
    columns: int,
    rows: int,
    replay: tuple[Path, float] | None = None,
) -> float:
    """Percent of one core that `tool` used over `window` seconds after `warmup` seconds."""
    process, master, _ = run_in_pty(tool_command(tool, interval, replay), columns, rows)
    try:
        time.sleep(warmup)
        if process.poll() is not None:
            raise RuntimeError(f"{tool} exited early with code {process.returncode}")
        start_cpu, start_wall = tree_cpu_seconds(process.pid), time.monotonic()
        time.sleep(window)
        used = tree_cpu_seconds(process.pid) - start_cpu
        elapsed = time.monotonic() - start_wall
        if process.poll() is not None:
            raise RuntimeError(f"{tool} exited during the window with code {process.returncode}")
        return 100.0 * used / elapsed
    finally:
        stop_group(process)
        os.close(master)


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL it after 5 s; quiet if it is already gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def gpu_name() -> str:
    if shutil.which("nvidia-smi") is None:
        return "no GPU"
    output = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return ", ".join(sorted(set(output.splitlines()))) or "no GPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 0.25])
    parser.add_argument("--tools", nargs="+", default=["gpumon", "nvitop"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--columns", type=int, default=160)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--no-load", action="store_true", help="do not run the training load")
    parser.add_argument(
        "--replay",
        type=Path,
        metavar="FILE",
        help="measure only gpumon's dashboard replaying this recording (no GPU, no load, no nvitop)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    replays: dict[float, tuple[Path, float]] = {}
    scratch = None
    if args.replay is not None:
        args.tools, args.no_load = [REPLAY], True
        scratch = tempfile.TemporaryDirectory(prefix="gpumon-overhead-")
        try:
            for interval in args.intervals:
                replays[interval] = looped_recording(
                    args.replay, args.warmup + args.window + 10, interval, Path(scratch.name)
                )
        except RecordingError as error:
            print(f"monitor_overhead: {error}", file=sys.stderr)
            return 2

    load = None
    if not args.no_load:
        load = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "training_load.py"), "--duration", "100000"],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(10)
    samples: dict[tuple[str, float], list[float]] = {}
    try:
        for interval in args.intervals:
            for round_index in range(args.rounds):
                order = args.tools if round_index % 2 == 0 else list(reversed(args.tools))
                for tool in order:
                    value = measure(
                        tool, interval, args.warmup, args.window, args.columns, args.rows, replays.get(interval)
                    )
                    samples.setdefault((tool, interval), []).append(value)
                    print(f"round {round_index + 1}: {tool} at {interval:g} s: {value:.2f}% of a core", flush=True)
    finally:
        if load is not None:
            stop_group(load)
        if scratch is not None:
            scratch.cleanup()

    device, date = gpu_name(), datetime.date.today().isoformat()
    source = f", replay of {args.replay}" if args.replay is not None else ""
    print(
        f"\nMonitor CPU cost, % of one core ({device}, {date}, {args.columns}x{args.rows} pty, "
        f"{args.rounds} rounds x {args.window:g} s, training load {'off' if args.no_load else 'on'}{source})"
    )
    print(f"{'tool':<13} {'interval':>8} {'median':>8} {'min':>7} {'max':>7}")
    results = []
    for (tool, interval), values in samples.items():
        row = {
            "tool": tool,
            "interval": interval,
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "samples": values,
        }
        results.append(row)
        print(f"{tool:<13} {interval:>7g}s {row['median']:>7.2f}% {row['min']:>6.2f}% {row['max']:>6.2f}%")
    if args.json:
        report = {"device": device, "date": date, "results": results}
        if args.replay is not None:
            report["replay"] = str(args.replay)
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
