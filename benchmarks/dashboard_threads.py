"""Where the dashboard's CPU goes: per thread (from /proc) and in Python's garbage collector, in a pseudo-terminal.

Usage (from the project root; on a GPU machine for the live dashboard, anywhere for `--replay`):

    python benchmarks/dashboard_threads.py --interval 1 --warmup 8 --window 30
    python benchmarks/dashboard_threads.py --replay assets/recordings/h100-training.jsonl --window 20

gpumon runs in a 160x50 pty (as in monitor_overhead.py, whose pty, load and replay code this reuses) under a small
probe: a thread, started with the dashboard, that wakes twice, at the end of the warm-up and at the end of the
window. Each time it reads every thread's time on a CPU and how many times it ran (/proc/self/task/TID/schedstat)
and maps each TID to its Python thread name (`threading.enumerate()`'s native ids); a GC callback sums the time
the collector runs, per generation. The probe's thread sleeps between its two reads, adding nothing to the window.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import monitor_overhead  # the benchmark next door, for its pty, load and replay helpers

from gpumon.sampling.recording import RecordingError

PROBE = r"""
import gc, json, os, runpy, sys, threading, time

report_path, warmup, window, profile_path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
gc_seconds = [0.0, 0.0, 0.0]
gc_counts = [0, 0, 0]
gc_started = [0.0]


def on_gc(phase, info):
    if phase == "start":
        gc_started[0] = time.thread_time()
    else:
        generation = info["generation"]
        gc_seconds[generation] += time.thread_time() - gc_started[0]
        gc_counts[generation] += 1


def thread_times():
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    times = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stream:
                on_cpu, _, slices = stream.read().split()[:3]
        except (OSError, ValueError, IndexError):
            continue
        name = names.get(int(tid)) or f"native-{tid}"
        times[f"{name} [{tid}]"] = (int(on_cpu) / 1e9, int(slices))
    return times


apps = []
if profile_path:
    import textual.app

    textual_run = textual.app.App.run

    def run_and_note(self, *args, **kwargs):
        apps.append(self)
        return textual_run(self, *args, **kwargs)

    textual.app.App.run = run_and_note


def probe():
    time.sleep(warmup)
    profiler = app = None
    if profile_path:
        import cProfile

        profiler, app = cProfile.Profile(time.thread_time), apps[-1]
        app.call_from_thread(lambda: profiler.enable())
    before, gc_before, counts_before = thread_times(), list(gc_seconds), list(gc_counts)
    started = time.monotonic()
    time.sleep(window)
    after, elapsed = thread_times(), time.monotonic() - started
    if profiler is not None:
        app.call_from_thread(lambda: profiler.disable())
        profiler.dump_stats(profile_path)
    report = {
        "elapsed": elapsed,
        "threads": {
            name: [seconds - before.get(name, (0.0, 0))[0], slices - before.get(name, (0.0, 0))[1]]
            for name, (seconds, slices) in after.items()
        },
        "gc_seconds": [now - then for now, then in zip(gc_seconds, gc_before)],
        "gc_counts": [now - then for now, then in zip(gc_counts, counts_before)],
        "gc_objects": len(gc.get_objects()),
    }
    with open(report_path, "w") as stream:
        json.dump(report, stream)


def probe_or_say_why():
    try:
        probe()
    except BaseException:
        import traceback

        with open(report_path + ".error", "w") as stream:
            traceback.print_exc(file=stream)


gc.callbacks.append(on_gc)
threading.Thread(target=probe_or_say_why, name="probe", daemon=True).start()
sys.argv = ["gpumon", *sys.argv[5:]]
runpy.run_module("gpumon", run_name="__main__", alter_sys=True)
"""


def print_top_frames(raw: Path, count: int = 30) -> None:
    """The functions most often on top of the stack (self) and on it at all (total), from py-spy's raw output."""
    if not raw.exists():
        print(f"  py-spy wrote no {raw}")
        return
    on_top: dict[str, int] = {}
    on_stack: dict[str, int] = {}
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        frames = [frame for frame in stack.split(";") if not frame.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples = int(number)
        total += samples
        on_top[frames[-1]] = on_top.get(frames[-1], 0) + samples
        for frame in set(frames):
            on_stack[frame] = on_stack.get(frame, 0) + samples
    print(f"  py-spy: {total} samples off idle")
    for title, table in (("self", on_top), ("total", on_stack)):
        print(f"  top {count} by {title}:")
        for frame, samples in sorted(table.items(), key=lambda item: -item[1])[:count]:
            print(f"    {100 * samples / max(1, total):5.1f}%  {frame[:150]}")


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--columns", type=int, default=160)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--replay", type=Path, metavar="FILE", help="replay this recording instead of sampling")
    parser.add_argument("--no-load", action="store_true", help="live: do not run the training load")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument(
        "--cprofile",
        nargs=2,
        metavar=("N", "FILE"),
        help="also profile the UI thread over the window with cProfile (its own CPU time, inflated by the profiler) "
        "into FILE and print its top N functions",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="RAW",
        help="also sample the window with py-spy (--nonblocking, 1000 Hz, idle frames left out) into this raw file "
        "and print the functions most often on top of the stack (py-spy's reads perturb the figures a little)",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_arguments()
    if not args.window > 0 or not args.warmup >= 0 or not args.interval > 0:
        print("dashboard_threads: --window and --interval must be above 0, --warmup 0 or more", file=sys.stderr)
        return 2
    if args.py_spy is not None and shutil.which("py-spy") is None:
        print("dashboard_threads: --py-spy needs py-spy on PATH (pip install py-spy)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpumon-threads-") as scratch:
        if args.replay is not None:
            try:
                looped = monitor_overhead.looped_recording(
                    args.replay, args.warmup + args.window + 10, args.interval, Path(scratch)
                )
            except (RecordingError, OSError) as error:
                print(f"dashboard_threads: {error}", file=sys.stderr)
                return 2
            tool_args = monitor_overhead.tool_command(monitor_overhead.REPLAY, args.interval, looped)[3:]
        else:
            tool_args = monitor_overhead.tool_command("gpumon", args.interval)[3:]
        load = None
        if args.replay is None and not args.no_load:
            load = monitor_overhead.start_load()
        report_path = Path(scratch) / "report.json"
        profile = str(args.cprofile[1]) if args.cprofile else ""
        command = [sys.executable, "-c", PROBE, str(report_path), str(args.warmup), str(args.window), profile]
        command += tool_args
        process, master, output = monitor_overhead.run_in_pty(command, args.columns, args.rows)
        try:
            time.sleep(args.warmup)
            start_bytes = output.bytes_read
            if args.py_spy is not None:
                spy = subprocess.Popen(
                    [
                        *("py-spy", "record", "--nonblocking", "--rate", "1000", "--format", "raw", "--threads"),
                        *("--duration", f"{int(args.window)}", "--pid", str(process.pid), "--output", str(args.py_spy)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            deadline = time.monotonic() + args.window + 10
            while (
                not report_path.exists()
                and not Path(f"{report_path}.error").exists()
                and time.monotonic() < deadline
                and process.poll() is None
            ):
                time.sleep(0.2)
            time.sleep(0.2)
            written = output.bytes_read - start_bytes
            if not report_path.exists():
                error = Path(f"{report_path}.error")
                why = error.read_text().strip().splitlines()[-1] if error.exists() else f"exit code {process.poll()}"
                print(f"dashboard_threads: gpumon wrote no report ({why})", file=sys.stderr)
                return 1
            report = json.loads(report_path.read_text())
        finally:
            monitor_overhead.stop_group(process)
            os.close(master)
            if load is not None:
                monitor_overhead.stop_group(load)
    elapsed = report["elapsed"]
    threads = report["threads"]
    total = sum(seconds for seconds, _ in threads.values())
    source = f"replay of {args.replay}" if args.replay else "live" + ("" if args.no_load else ", training load on")
    print(
        f"gpumon at {args.interval:g} s, {source}, {args.columns}x{args.rows} pty, {monitor_overhead.gpu_name()}, "
        f"{time.strftime('%Y-%m-%d')}: {args.window:g} s after {args.warmup:g} s of warm-up"
    )
    print(
        f"all threads: {100 * total / elapsed:.3f}% of one core; ~{written / 1024 / elapsed:.2f} KiB/s to the terminal"
    )
    print(f"  {'thread':<40} {'% of a core':>11} {'runs/s':>8} {'us/run':>8}")
    for name, (seconds, slices) in sorted(threads.items(), key=lambda item: -item[1][0]):
        per_run = 1e6 * seconds / slices if slices else 0.0
        print(f"  {name:<40} {100 * seconds / elapsed:10.3f}% {slices / elapsed:8.1f} {per_run:8.0f}")
    for generation, (seconds, count) in enumerate(zip(report["gc_seconds"], report["gc_counts"], strict=True)):
        print(f"  gc generation {generation}: {count} collections, {100 * seconds / elapsed:.3f}% of one core")
    print(f"  objects tracked by the gc at the end: {report['gc_objects']}")
    if args.cprofile:
        stats = pstats.Stats(args.cprofile[1], stream=sys.stdout)
        for order in ("tottime", "cumulative"):
            stats.sort_stats(order).print_stats(int(args.cprofile[0]))
    if args.py_spy is not None:
        spy.wait(30)
        print_top_frames(args.py_spy)
    if args.json:
        args.json.write_text(json.dumps({**report, "interval": args.interval, "source": source}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
