"""Renders the dashboard over a recording, headless, and saves Textual's SVG screenshot (for the README)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from gpumon.sampling.recording import read_recording
from gpumon.sampling.replay import Replayer
from gpumon.tui.app import GpumonApp


class _StillReplay(Replayer):
    """A replay that delivers every snapshot at once when started, then holds still."""

    def start(self, on_snapshot) -> None:
        while (snapshot := self.step()) is not None:
            on_snapshot(snapshot)


async def render(recording: Path, output: Path, columns: int, rows: int) -> None:
    snapshots = read_recording(recording)
    source = _StillReplay(snapshots, name=recording.name)
    app = GpumonApp(source, clock=lambda: snapshots[-1].timestamp)
    async with app.run_test(size=(columns, rows)) as pilot:
        await pilot.pause(0.5)
        output.write_text(app.export_screenshot(title=f"gpumon: {recording.name}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("recording", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--size", default="160x50", help="COLUMNSxROWS")
    args = parser.parse_args()
    columns, rows = (int(part) for part in args.size.split("x"))
    asyncio.run(render(args.recording, args.output, columns, rows))


if __name__ == "__main__":
    main()
