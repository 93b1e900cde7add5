"""Screenshot (SVG) regression tests at 80x24, 160x50 and 220x60 with 1, 2, 4 and 8 GPUs, fed from the recordings
in conftest: RECORDING (one GPU) and TWO_GPU_RECORDING, and the 4- and 8-GPU views built from the real recordings by
tests/fixtures/make_many_gpus.py.

Regenerate after an intended change, or after switching RECORDING: python -m pytest tests/tui --snapshot-update
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import REPOSITORY, TWO_GPU_SHOWN
from textual.pilot import Pilot
from tui_support import FakeSource, frozen_clock

from gpumon.sampling.recording import read_recording
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


def many_gpus(count: int) -> list[Snapshot]:
    """The 4- or 8-GPU view (tests/fixtures/make_many_gpus.py), as many samples as the 2-GPU screenshots show."""
    return read_recording(REPOSITORY / "tests" / "fixtures" / f"gpus{count}.jsonl")[:TWO_GPU_SHOWN]


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("size", [(80, 24), (160, 50), (220, 60)], ids=lambda size: f"{size[0]}x{size[1]}")
def test_dashboard(
    snap_compare, recording, recording_name, two_gpu_recording, two_gpu_recording_name, size: tuple[int, int], gpus: int
) -> None:
    if gpus == 1:
        snapshots = recording[:SHOWN]
        app, source = dashboard(snapshots, recording_name)
    else:
        snapshots = two_gpu_recording if gpus == 2 else many_gpus(gpus)
        app, source = dashboard(snapshots, two_gpu_recording_name if gpus == 2 else f"gpus{gpus}.jsonl", interval=1.0)
    assert snap_compare(app, terminal_size=size, run_before=fed(source, snapshots))


def test_dashboard_without_nvidia_driver_80x24(snap_compare, recording, recording_name) -> None:
    """Live, as a machine without a driver is watched: no GPU processes, and the process table says how to list every
    process."""
    error = "NVIDIA driver not found (libnvidia-ml.so.1 missing)"
    snapshots = [replace(snapshot, gpus=(), gpu_error=error, processes=()) for snapshot in recording[:SHOWN]]
    source = FakeSource(description="live", interval=0.5, live=True)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    assert snap_compare(app, terminal_size=(80, 24), run_before=fed(source, snapshots))


def test_help_screen_80x24(snap_compare, recording, recording_name) -> None:
    snapshots = recording[:SHOWN]
    app, source = dashboard(snapshots, recording_name)
    assert snap_compare(app, press=["question_mark"], terminal_size=(80, 24), run_before=fed(source, snapshots))
