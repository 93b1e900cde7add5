"""The app over a real Replayer thread: data reaches the screen, keys reach the replayer, the thread ends on quit."""

from __future__ import annotations

import asyncio
import threading

from tui_support import widget_text

from gpumon.sampling.replay import Replayer
from gpumon.tui.app import GpumonApp
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.title_bar import TitleBar

GENEROUS_WAIT = 10.0


async def test_app_over_a_replayer_thread_shows_data_and_controls_it(recording) -> None:
    replayer = Replayer(recording, speed=1.0, name="h100-training.jsonl")
    app = GpumonApp(replayer)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(ProcessTable)
        deadline = asyncio.get_running_loop().time() + GENEROUS_WAIT
        while table.row_count == 0 or app.snapshot is None:
            assert asyncio.get_running_loop().time() < deadline, "no snapshot reached the screen"
            await pilot.pause(0.05)
        assert table.pids[0] == recording[0].processes[0].pid
        assert "Util" in widget_text(app.query_one(GpuPane))
        assert app.query_one(TitleBar).sub_title.startswith("replay of h100-training.jsonl")
        await pilot.press("plus")
        assert replayer.speed == 2.0
        await pilot.press("p")
        assert replayer.paused
        assert "PAUSED" in app.query_one(TitleBar).title
        await pilot.press("q")
    assert app.return_code == 0
    assert not any(thread.name == "gpumon-replay" and thread.is_alive() for thread in threading.enumerate())
