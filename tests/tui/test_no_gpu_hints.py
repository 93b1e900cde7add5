"""The screens where no GPU is seen (no driver, NVML missing): the process table says how to list every process,
and `e` says why there is no GPU sample, in the GPU pane's own words."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import REPOSITORY
from screen_text import screen_rows
from tui_support import FakeSource, frozen_clock

from gpumon.sampling.history import History
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot
from gpumon.tui.app import GpumonApp
from gpumon.tui.gpu_pane import layout
from gpumon.tui.health_screen import HealthScreen, detail_text
from gpumon.tui.process_table import NO_GPU_LIVE, NO_GPU_REPLAY, ProcessTable

RECORDING = REPOSITORY / "assets" / "recordings" / "h200x2-tests.jsonl"
ERRORS = (
    "NVIDIA driver not found (libnvidia-ml.so.1 missing)",
    "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    "NVML failed (Driver Not Loaded); retrying every 10 s",
)


def no_gpu(error: str | None, count: int = 5) -> list[Snapshot]:
    return [replace(snapshot, gpus=(), gpu_error=error, processes=()) for snapshot in read_recording(RECORDING)[:count]]


@pytest.mark.parametrize("error", [*ERRORS, None])
def test_e_says_what_the_gpu_pane_says(error: str | None) -> None:
    snapshot = no_gpu(error, 1)[0]
    pane = layout(snapshot, History(), width=80, max_lines=5).lines
    assert len(pane) == 1
    assert detail_text(snapshot).plain == pane[0].plain
    assert detail_text(snapshot).plain.startswith("GPU: ")
    assert detail_text(None).plain == "no GPU sample yet"


def test_e_lists_gpus_where_there_are_some() -> None:
    snapshot = read_recording(RECORDING)[0]
    assert "GPU0" in detail_text(snapshot).plain and "GPU: " not in detail_text(snapshot).plain


def process_title(app: GpumonApp) -> str:
    return str(app.query_one(ProcessTable).border_title)


async def test_driverless_dashboard_hints_v_and_e_says_why() -> None:
    snapshots = no_gpu(ERRORS[0])
    source = FakeSource(interval=0.5, live=True)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(120, 40)) as pilot:
        source.push(*snapshots)
        await pilot.pause()
        assert NO_GPU_LIVE in process_title(app) and "0 on GPU" not in process_title(app)
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, HealthScreen)
        screen = "\n".join(screen_rows(app))
        assert "GPU: NVIDIA driver not found (libnvidia-ml.so.1 missing)" in screen
        assert "no GPU sample yet" not in screen


async def test_the_hint_goes_when_gpus_come_and_a_replay_does_not_offer_v() -> None:
    recording = read_recording(RECORDING)[:3]
    live = FakeSource(interval=0.5, live=True)
    app = GpumonApp(live, clock=frozen_clock(recording))
    async with app.run_test(size=(120, 40)) as pilot:
        live.push(*no_gpu(ERRORS[0], 2))
        await pilot.pause()
        assert NO_GPU_LIVE in process_title(app)
        live.push(recording[2])
        await pilot.pause()
        assert NO_GPU_LIVE not in process_title(app) and "on GPU" in process_title(app)
    replay = FakeSource(interval=0.5)
    app = GpumonApp(replay, clock=frozen_clock(recording))
    async with app.run_test(size=(120, 40)) as pilot:
        replay.push(*no_gpu(ERRORS[0], 2))
        await pilot.pause()
        assert NO_GPU_REPLAY in process_title(app) and NO_GPU_LIVE not in process_title(app)
