"""Screenshot (SVG) regression tests at 80x24, 160x50 and 220x60 with 1, 2 and 8 GPUs, fed from the recordings in
conftest: RECORDING (one GPU, copied for 8) and TWO_GPU_RECORDING.

Regenerate after an intended change, or after switching RECORDING: python -m pytest tests/tui --snapshot-update
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.pilot import Pilot
from tui_support import FakeSource, frozen_clock

from gpumon.sampling.snapshot import Snapshot
from gpumon.tui.app import GpumonApp

SHOWN = 100
"""Snapshots fed before the screenshot: enough to fill the sparklines of an 80-column screen."""


def dashboard(snapshots: list[Snapshot], recording_name: str, interval: float = 0.5) -> tuple[GpumonApp, FakeSource]:
    source = FakeSource(description=f"replay of {recording_name}", interval=interval)
    return GpumonApp(source, clock=frozen_clock(snapshots)), source


def fed(source: FakeSource, snapshots: list[Snapshot]):
    async def run_before(pilot: Pilot) -> None:
        source.push(*snapshots)
        await pilot.pause()

    return run_before


def with_gpus(snapshots: list[Snapshot], count: int) -> list[Snapshot]:
    """The recording's GPU copied to `count` GPUs, each a little less busy than the one before (no recording at hand
    has more than two)."""
    if count == 1:
        return snapshots
    return [
        replace(
            shown,
            gpus=tuple(
                replace(
                    shown.gpus[0],
                    index=index,
                    uuid=f"GPU-{index}",
                    utilization_gpu=None
                    if shown.gpus[0].utilization_gpu is None
                    else shown.gpus[0].utilization_gpu * (1 - index / (2 * count)),
                )
                for index in range(count)
            ),
        )
        for shown in snapshots
    ]


@pytest.mark.parametrize("gpus", [1, 2, 8])
@pytest.mark.parametrize("size", [(80, 24), (160, 50), (220, 60)], ids=lambda size: f"{size[0]}x{size[1]}")
def test_dashboard(
    snap_compare, recording, recording_name, two_gpu_recording, two_gpu_recording_name, size: tuple[int, int], gpus: int
) -> None:
    if gpus == 2:
        snapshots = two_gpu_recording
        app, source = dashboard(snapshots, two_gpu_recording_name, interval=1.0)
    else:
        snapshots = with_gpus(recording[:SHOWN], gpus)
        app, source = dashboard(snapshots, recording_name)
    assert snap_compare(app, terminal_size=size, run_before=fed(source, snapshots))


def test_dashboard_without_nvidia_driver_80x24(snap_compare, recording, recording_name) -> None:
    error = "NVIDIA driver not found (libnvidia-ml.so.1 missing)"
    snapshots = [replace(snapshot, gpus=(), gpu_error=error) for snapshot in recording[:SHOWN]]
    app, source = dashboard(snapshots, recording_name)
    assert snap_compare(app, terminal_size=(80, 24), run_before=fed(source, snapshots))


def test_help_screen_80x24(snap_compare, recording, recording_name) -> None:
    snapshots = recording[:SHOWN]
    app, source = dashboard(snapshots, recording_name)
    assert snap_compare(app, press=["question_mark"], terminal_size=(80, 24), run_before=fed(source, snapshots))
