"""CPU cost and terminal output of the gpumon dashboard against nvitop, each in a pseudo-terminal, in one run.

Usage (on a GPU machine, from the project root):

    python benchmarks/monitor_overhead.py --intervals 1 0.25 --rounds 3 --window 30 --json out.json

For each interval it alternates gpumon and nvitop (round-robin, the order reversed every other round, `--rounds`
times, at least 3 unless `--allow-fewer`), leaves out each start's first `--warmup` seconds (8 by default), then
over `--window` seconds reads the CPU time (the tool's and its children's threads' time on a CPU, from
/proc/PID/task/TID/schedstat in nanoseconds) it spends, as a percentage of one core, and the bytes it writes to its
terminal (drained from the pty in that window only), per second. Each is reported per tool and interval as the
median and the min-max over the rounds. A training load (benchmarks/training_load.py) runs the whole time unless
`--no-load` is given, so both tools have a GPU process and its workers to show.

Without a GPU, `--replay FILE` measures gpumon's dashboard alone (the TUI cost, no sampling), replaying a
recording made with `gpumon record` one snapshot per interval, repeated as long as the run needs:

    python benchmarks/monitor_overhead.py --replay assets/recordings/h100-training.jsonl --rounds 3 --window 10

`--base DIR` adds gpumon from another checkout (`git worktree add DIR REV`, or `git archive REV | tar -x -C DIR`) as
the tool `gpumon-base`, alternated with the others: a change's effect measured in the same run as its anchor. With
`--replay` it replays the same recording.
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
TOOLS = ("gpumon", "nvitop")
BASE = "gpumon-base"
"""The tool name of gpumon run from the checkout `--base` names."""
MIN_ROUNDS = 3
"""Fewer rounds give no median worth the name; `--allow-fewer` lets a quick check run them anyway."""


class BenchmarkError(Exception):
    """A run that cannot go on; main prints its message as one line."""


@dataclasses.dataclass
class PtyOutput:
    """The bytes a tool has written to its terminal so far, counted by the thread that drains them."""

    reader: threading.Thread | None = None
    bytes_read: int = 0


@dataclasses.dataclass(frozen=True)
class Measurement:
    """One tool's window: CPU as % of one core, and bytes written to its terminal per second."""

    cpu_percent: float
    bytes_per_s: float


def tool_command(tool: str, interval: float, replay: tuple[Path, float] | None = None) -> list[str]:
    """The command line of a tool at an interval; for REPLAY (and BASE with a replay), `replay` is (recording, its
    snapshot spacing in s)."""
    if tool == REPLAY or (tool == BASE and replay is not None):
        if replay is None:
            raise ValueError("the replay tool needs a recording")
        recording, spacing = replay
        return [sys.executable, "-m", "gpumon", "replay", str(recording), "--speed", f"{spacing / interval:g}"]
    if tool in ("gpumon", BASE):
        return [sys.executable, "-m", "gpumon", "--interval", f"{interval:g}"]
    if tool == "nvitop":
        return [sys.executable, "-m", "nvitop", "--interval", f"{interval:g}"]
    raise ValueError(tool)


def run_in_pty(
    command: list[str], columns: int, rows: int, cwd: Path = ROOT
) -> tuple[subprocess.Popen[bytes], int, PtyOutput]:
    """Start `command` in `cwd` (where `python -m` imports from first) on a fresh pseudo-terminal of the given size
    and drain its output in a thread, counting it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, cwd=cwd
    )
    os.close(slave)
    output = PtyOutput()

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            output.bytes_read += len(data)

    output.reader = threading.Thread(target=drain, daemon=True)
    output.reader.start()
    return process, master, output


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds so far of a process and its children, summed over their threads' scheduler statistics
    (/proc/PID/task/TID/schedstat, in nanoseconds): psutil's user + system times count in clock ticks of 10 ms,
    0.05% of a core over a 20 s window, as coarse as the differences this benchmark is after. psutil's figure is
    the fallback where schedstat is missing (a kernel without CONFIG_SCHEDSTATS)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            total += _schedstat_seconds(process.pid)
        except OSError:
            try:
                times = process.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
    return total


def _schedstat_seconds(pid: int) -> float:
    """On-CPU seconds of every thread a process has now (a thread that already ended is not counted)."""
    total_ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stream:
                total_ns += int(stream.read().split()[0])
        except FileNotFoundError:
            continue
    return total_ns / 1e9


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
    base: Path | None = None,
) -> Measurement:
    """What `tool` cost over `window` seconds after `warmup` seconds: % of one core, and bytes/s to its terminal."""
    cwd = base if tool == BASE and base is not None else ROOT
    return measure_command(tool_command(tool, interval, replay), tool, warmup, window, columns, rows, cwd)


def measure_command(
    command: list[str], name: str, warmup: float, window: float, columns: int, rows: int, cwd: Path = ROOT
) -> Measurement:
    """measure() for any command line, called `name` in errors."""
    process, master, output = run_in_pty(command, columns, rows, cwd)
    try:
        time.sleep(warmup)
        if process.poll() is not None:
            raise BenchmarkError(f"{name} exited during its warm-up with code {process.returncode}")
        start_bytes = output.bytes_read
        start_cpu, start_wall = tree_cpu_seconds(process.pid), time.monotonic()
        time.sleep(window)
        used = tree_cpu_seconds(process.pid) - start_cpu
        elapsed = time.monotonic() - start_wall
        written = output.bytes_read - start_bytes
        if process.poll() is not None:
            raise BenchmarkError(f"{name} exited during the window with code {process.returncode}")
        return Measurement(cpu_percent=100.0 * used / elapsed, bytes_per_s=written / elapsed)
    finally:
        stop_group(process)
        os.close(master)


def start_load() -> subprocess.Popen[bytes]:
    """Start benchmarks/training_load.py (a CNN with DataLoader workers on the GPU) and give it 10 s to settle."""
    load = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "training_load.py"), "--duration", "100000"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(10)
    return load


def stop_group(process: subprocess.Popen[bytes]) -> None:
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


def median_min_max(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def spread(values: list[float]) -> dict[str, float | list[float]]:
    """The median, min and max of one tool's rounds, and the rounds themselves (for the JSON)."""
    median, low, high = median_min_max(values)
    return {"median": median, "min": low, "max": high, "samples": values}


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 0.25])
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"at least {MIN_ROUNDS} (default)")
    parser.add_argument("--allow-fewer", action="store_true", help=f"allow fewer than {MIN_ROUNDS} rounds")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds left out after each start")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured per tool and round")
    parser.add_argument("--columns", type=int, default=160)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--no-load", action="store_true", help="do not run the training load")
    parser.add_argument(
        "--replay",
        type=Path,
        metavar="FILE",
        help="measure only gpumon's dashboard replaying this recording (no GPU, no load, no nvitop)",
    )
    parser.add_argument(
        "--base",
        type=Path,
        metavar="DIR",
        help=f"also measure gpumon from the checkout in DIR, as {BASE}, alternated with the other tools (replaying"
        " the same recording with --replay)",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args()


def argument_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, in one line; None where nothing is."""
    if args.rounds < 1:
        return f"--rounds {args.rounds}: at least one round is needed"
    if args.rounds < MIN_ROUNDS and not args.allow_fewer:
        return (
            f"--rounds {args.rounds}: steady-state figures need at least {MIN_ROUNDS} rounds (--allow-fewer for fewer)"
        )
    if any(not interval > 0 for interval in args.intervals):
        return "--intervals: every interval must be a positive number of seconds"
    if not args.warmup >= 0 or not args.window > 0:
        return "--warmup must be 0 or more and --window more than 0 seconds"
    if args.base is not None and not (args.base / "gpumon" / "__main__.py").is_file():
        return f"--base {args.base}: no gpumon checkout there (gpumon/__main__.py is missing)"
    if args.columns < 20 or args.rows < 10:
        return f"--columns {args.columns} --rows {args.rows}: the terminal must be at least 20x10"
    return None


def main() -> int:
    args = parse_arguments()
    problem = argument_problem(args)
    if problem is not None:
        print(f"monitor_overhead: {problem}", file=sys.stderr)
        return 2

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
        except (RecordingError, OSError) as error:
            scratch.cleanup()
            print(f"monitor_overhead: {error}", file=sys.stderr)
            return 2

    if args.base is not None:
        args.tools = [*args.tools, BASE]
    load = None
    if not args.no_load:
        load = start_load()
    samples: dict[tuple[str, float], list[Measurement]] = {}
    try:
        for interval in args.intervals:
            for round_index in range(args.rounds):
                order = args.tools if round_index % 2 == 0 else list(reversed(args.tools))
                for tool in order:
                    value = measure(
                        tool,
                        interval,
                        args.warmup,
                        args.window,
                        args.columns,
                        args.rows,
                        replays.get(interval),
                        args.base,
                    )
                    samples.setdefault((tool, interval), []).append(value)
                    print(
                        f"round {round_index + 1}: {tool} at {interval:g} s: {value.cpu_percent:.2f}% of a core, "
                        f"{value.bytes_per_s / 1024:.2f} KiB/s to the terminal",
                        flush=True,
                    )
    except BenchmarkError as error:
        print(f"monitor_overhead: {error}", file=sys.stderr)
        return 1
    finally:
        if load is not None:
            stop_group(load)
        if scratch is not None:
            scratch.cleanup()

    device, date = gpu_name(), datetime.date.today().isoformat()
    source = f", replay of {args.replay}" if args.replay is not None else ""
    print(
        f"\nMonitor cost, steady state ({device}, {date}, {args.columns}x{args.rows} pty, {args.rounds} rounds x "
        f"{args.window:g} s after {args.warmup:g} s of warm-up, tools alternated, "
        f"training load {'off' if args.no_load else 'on'}{source})"
    )
    print(f"{'':<22} {'CPU, % of one core':^26} {'to the terminal, KiB/s':^26}")
    print(f"{'tool':<13} {'interval':>8} {'median':>8} {'min':>8} {'max':>8} {'median':>8} {'min':>8} {'max':>8}")
    results = []
    for (tool, interval), values in samples.items():
        cpu = [value.cpu_percent for value in values]
        written = [value.bytes_per_s for value in values]
        results.append({"tool": tool, "interval": interval, **spread(cpu), "bytes_per_s": spread(written)})
        cpu_cells = " ".join(f"{figure:>7.2f}%" for figure in median_min_max(cpu))
        kib_cells = " ".join(f"{figure / 1024:>8.2f}" for figure in median_min_max(written))
        print(f"{tool:<13} {interval:>7g}s {cpu_cells} {kib_cells}")
    if args.json:
        report: dict[str, object] = {
            "device": device,
            "date": date,
            "columns": args.columns,
            "rows": args.rows,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "window": args.window,
            "load": not args.no_load,
            "results": results,
        }
        if args.replay is not None:
            report["replay"] = str(args.replay)
        if args.base is not None:
            report["base"] = str(args.base)
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
