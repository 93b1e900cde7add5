"""CPU time and terminal bytes of the dashboard's render path per snapshot, replaying a recording in-process.

Usage (no GPU needed; from the project root, or with PYTHONPATH pointing at another checkout to compare):

    python benchmarks/tui_render_cost.py assets/recordings/h100-training.jsonl --size 160x50 --ticks 300

The app runs headless; every frame Textual would write is still rendered to its escape sequences and counted, so
the bytes are those a terminal would receive. The first `--warmup` snapshots (history filling, first layout) are
left out. Bytes/s assume one snapshot per `--interval` seconds.

Two CPU figures: "frame work" is the thread time inside the snapshot's redraw (`GpumonApp.show_snapshot`) and the
screen's refresh (`Screen._compositor_refresh`: the compositor and the escape codes), what the live dashboard's UI
thread spends per snapshot; "in all" adds the test harness's own event-loop turns around each snapshot.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from textual._compositor import CompositorUpdate
from textual.app import App
from textual.screen import Screen

from gpumon.config import Settings
from gpumon.sampling.history import History
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import ProcessSample, Snapshot
from gpumon.sampling.source import SnapshotCallback
from gpumon.tui.app import GpumonApp
from gpumon.tui.terminal_output import compact_sgr
from gpumon.tui.view_options import ViewOptions


class ReplaySource:
    """A SnapshotSource the benchmark feeds by hand (no thread, no timing of its own)."""

    def __init__(self, interval: float) -> None:
        self.history = History()
        self.live = False
        self.description = "render benchmark"
        self.interval = interval
        self.paused = False
        self.callback: SnapshotCallback | None = None

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self.callback = on_snapshot

    def stop(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def faster(self) -> None: ...
    def slower(self) -> None: ...

    def push(self, snapshot: Snapshot) -> None:
        self.history.add(snapshot)
        assert self.callback is not None
        self.callback(snapshot)


written = [0]
sent = [0]
"""Bytes of the frames as the app's driver writes them: SGR-compacted (gpumon.tui.terminal_output)."""
compacting = [0.0]
frame_work = [0.0]


def time_frame_work() -> None:
    """Add the thread time spent in the snapshot's redraw and in the screen's refresh to `frame_work`."""
    for owner, name in ((GpumonApp, "show_snapshot"), (Screen, "_compositor_refresh")):
        original = getattr(owner, name)

        def timed(*args: object, _original: Any = original) -> object:
            started = time.thread_time()
            try:
                return _original(*args)
            finally:
                frame_work[0] += time.thread_time() - started

        setattr(owner, name, timed)


def count_terminal_bytes() -> None:
    """Make the headless app render each frame to the escape sequences a terminal would get, and count them."""
    original = App._display

    def display(self: App[object], screen: object, renderable: object) -> None:
        if isinstance(renderable, CompositorUpdate):
            frame = renderable.render_segments(self.console)
            written[0] += len(frame.encode())
            started = time.process_time()
            sent[0] += len(compact_sgr(frame).encode())  # what the app's driver writes (gpumon.tui.terminal_output)
            compacting[0] += time.process_time() - started
        original(self, screen, renderable)  # type: ignore[arg-type]  # the same arguments, passed on

    App._display = display  # type: ignore[method-assign]  # a benchmark-only probe


def training_job(tick: int, gpus: int, workers: int) -> tuple[ProcessSample, ...]:
    """One training process per GPU with `workers` DataLoader workers each, their CPU%, RSS and I/O new every second
    tick (as the sampler's slow tier, every 2 s, gives them to a live dashboard at 1 s)."""
    step = tick // 2
    jobs = []
    for gpu in range(gpus):
        pid = 1000 + 100 * gpu
        children = tuple(
            ProcessSample(
                pid=pid + 1 + worker,
                ppid=pid,
                user="alice",
                command=f"python -u train.py --config configs/resnet50.yaml (worker {worker})",
                cpu_percent=60.0 + (step * 7 + worker * 13) % 40,
                rss=(900 + (step * 3 + worker) % 50) * 1024 * 1024,
                state="running",
                read_bytes_per_s=float((step * 1_300_000 + worker * 200_000) % 90_000_000),
                write_bytes_per_s=0.0,
            )
            for worker in range(workers)
        )
        jobs.append(
            ProcessSample(
                pid=pid,
                ppid=1,
                user="alice",
                command="python -u train.py --config configs/resnet50.yaml",
                gpu_indices=(gpu,),
                gpu_memory=(40_000 + step % 7) * 1024 * 1024,
                sm_percent=float(70 + step % 25),
                cpu_percent=100.0 + step % 30,
                rss=(6000 + step % 11) * 1024 * 1024,
                state="running",
                read_bytes_per_s=0.0,
                write_bytes_per_s=float(step % 5) * 1_000_000,
                children=children,
            )
        )
    return tuple(jobs)


def looped(
    snapshots: list[Snapshot], count: int, gpus: int, spacing: float, job_workers: int | None = None
) -> list[Snapshot]:
    first = snapshots[0].timestamp
    result = []
    for index in range(count):
        shown = snapshots[index % len(snapshots)]
        copies = (
            tuple(dataclasses.replace(shown.gpus[0], index=i, uuid=f"GPU-{i}") for i in range(gpus))
            if shown.gpus
            else ()
        )
        processes = shown.processes if job_workers is None else training_job(index, gpus, job_workers)
        result.append(dataclasses.replace(shown, timestamp=first + index * spacing, gpus=copies, processes=processes))
    return result


async def run(
    snapshots: list[Snapshot], size: tuple[int, int], warmup: int, interval: float, host_graphs: bool = True
) -> tuple[float, float, float]:
    source = ReplaySource(interval)
    options = ViewOptions(Settings(host_graphs=host_graphs))
    app = GpumonApp(source, clock=lambda: snapshots[-1].timestamp, options=options)  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        for snapshot in snapshots[:warmup]:
            source.push(snapshot)
            await pilot.pause()
        await pilot.pause(0.1)
        written[0] = sent[0] = 0
        frame_work[0] = compacting[0] = 0.0
        cpu = 0.0
        for snapshot in snapshots[warmup:]:
            started = time.process_time()
            source.push(snapshot)
            await pilot.pause()
            await pilot.pause(0.02)  # let the screen refresh (its CPU is counted, the sleep is not)
            cpu += time.process_time() - started
        ticks = len(snapshots) - warmup
        return 1000 * cpu / ticks, 1000 * frame_work[0] / ticks, written[0] / ticks / interval


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path)
    parser.add_argument("--size", default="160x50")
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=1, help="copy the recording's GPU to this many")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--no-host-graphs", action="store_true", help="the CPU and memory graphs off (on by default)")
    parser.add_argument(
        "--job-workers",
        type=int,
        metavar="N",
        help="replace the recording's processes with a training process per GPU and N DataLoader workers each, whose "
        "figures change every second snapshot (as a live dashboard's do; a recording's processes may not change)",
    )
    args = parser.parse_args()
    columns, rows = (int(part) for part in args.size.split("x"))
    snapshots = looped(
        read_recording(args.recording), args.warmup + args.ticks, args.gpus, args.interval, args.job_workers
    )
    count_terminal_bytes()
    time_frame_work()
    ms, frame_ms, bytes_per_s = asyncio.run(
        run(snapshots, (columns, rows), args.warmup, args.interval, not args.no_host_graphs)
    )
    print(
        f"{args.size} {args.gpus} GPU(s), host graphs {'off' if args.no_host_graphs else 'on'}"
        f"{'' if args.job_workers is None else f', a job with {args.job_workers} workers a GPU'}: "
        f"{frame_ms:.2f} ms frame work per snapshot ({ms:.2f} ms CPU in all), "
        f"{bytes_per_s / 1024:.2f} KiB/s of frames, {sent[0] / args.ticks / args.interval / 1024:.2f} KiB/s to the "
        f"terminal after SGR compaction ({1000 * compacting[0] / args.ticks:.2f} ms a snapshot) at one snapshot per "
        f"{args.interval:g} s ({args.ticks} snapshots after {args.warmup})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
