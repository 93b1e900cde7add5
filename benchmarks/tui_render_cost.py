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
from gpumon.sampling.snapshot import Snapshot
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


def looped(snapshots: list[Snapshot], count: int, gpus: int, spacing: float) -> list[Snapshot]:
    first = snapshots[0].timestamp
    result = []
    for index in range(count):
        shown = snapshots[index % len(snapshots)]
        copies = (
            tuple(dataclasses.replace(shown.gpus[0], index=i, uuid=f"GPU-{i}") for i in range(gpus))
            if shown.gpus
            else ()
        )
        result.append(dataclasses.replace(shown, timestamp=first + index * spacing, gpus=copies))
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
    args = parser.parse_args()
    columns, rows = (int(part) for part in args.size.split("x"))
    snapshots = looped(read_recording(args.recording), args.warmup + args.ticks, args.gpus, args.interval)
    count_terminal_bytes()
    time_frame_work()
    ms, frame_ms, bytes_per_s = asyncio.run(
        run(snapshots, (columns, rows), args.warmup, args.interval, not args.no_host_graphs)
    )
    print(
        f"{args.size} {args.gpus} GPU(s), host graphs {'off' if args.no_host_graphs else 'on'}: "
        f"{frame_ms:.2f} ms frame work per snapshot ({ms:.2f} ms CPU in all), "
        f"{bytes_per_s / 1024:.2f} KiB/s of frames, {sent[0] / args.ticks / args.interval / 1024:.2f} KiB/s to the "
        f"terminal after SGR compaction ({1000 * compacting[0] / args.ticks:.2f} ms a snapshot) at one snapshot per "
        f"{args.interval:g} s ({args.ticks} snapshots after {args.warmup})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
