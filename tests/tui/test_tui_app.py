"""Pilot tests of the dashboard: keys, panes and the process table, fed by a fake source one snapshot at a time."""

from __future__ import annotations

import time
from dataclasses import replace

from textual.widgets import DataTable
from tui_support import GIB, FakeSource, gpu, process, snapshot, widget_text

from gpumon.sampling.snapshot import CpuSample
from gpumon.tui import app as app_module
from gpumon.tui.app import GpumonApp
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.gpu_pane import GRAPH_OFFSET, GpuPane
from gpumon.tui.graph import GraphStyle
from gpumon.tui.help_screen import HelpScreen
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.sparkline import BLOCKS
from gpumon.tui.title_bar import TitleBar


def two_jobs(timestamp: float = 1_795_000_000.0, **changes: object):
    """Job 100 holds more GPU memory, job 200 uses more CPU; each has workers."""
    first = process(
        100,
        gpu_indices=(0,),
        gpu_memory=40 * GIB,
        cpu_percent=20.0,
        children=(process(101, cpu_percent=70.0), process(102, cpu_percent=10.0)),
    )
    second = process(200, gpu_indices=(0,), gpu_memory=10 * GIB, cpu_percent=95.0, children=(process(201),))
    return snapshot(timestamp, processes=(first, second), **changes)


async def test_p_pauses_the_source_and_the_title_says_paused() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(snapshot())
        await pilot.pause()
        assert "PAUSED" not in app.query_one(TitleBar).title
        await pilot.press("p")
        assert source.paused
        assert "PAUSED" in app.query_one(TitleBar).title
        await pilot.press("p")
        assert not source.paused
        assert "PAUSED" not in app.query_one(TitleBar).title
    assert source.calls == ["start", "pause", "resume", "stop"]


async def test_plus_and_minus_change_the_interval_shown_in_the_subtitle() -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        assert "every 1s" in app.query_one(TitleBar).sub_title
        await pilot.press("plus")
        assert source.calls[-1] == "faster"
        assert "every 0.5s" in app.query_one(TitleBar).sub_title
        await pilot.press("minus", "minus")
        assert source.calls[-2:] == ["slower", "slower"]
        assert "every 2s" in app.query_one(TitleBar).sub_title


async def test_title_shows_host_and_the_snapshots_own_time() -> None:
    source = FakeSource(description="replay of x.jsonl")
    app = GpumonApp(source, clock=lambda: 0.0)
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(snapshot(timestamp=1_795_000_000.0))  # 2026-11-18 11:06:40 UTC
        await pilot.pause()
        assert app.query_one(TitleBar).title == "gpumon · testhost · 11:06:40"
        assert app.query_one(TitleBar).sub_title.startswith("replay of x.jsonl")


async def test_s_cycles_the_sort_and_workers_stay_under_their_job() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        source.push(two_jobs())
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert table.sort_column == "gpu_memory"
        assert table.pids == [100, 101, 102, 200, 201]
        assert _row_pids(table) == table.pids
        await pilot.press("s", "s")  # gpu_memory -> sm_percent -> cpu_percent
        assert table.sort_column == "cpu_percent"
        assert table.pids == [200, 201, 100, 101, 102]
        assert _row_pids(table) == table.pids
        await pilot.press("S")
        assert not table.sort_descending
        assert table.pids == [100, 102, 101, 200, 201]
        assert _row_pids(table) == table.pids
        assert "sort CPU% ▲" in str(table.border_title)


async def test_the_cursor_stays_on_its_pid_when_rows_reorder_and_new_rows_arrive() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        source.push(two_jobs())
        await pilot.pause()
        table = app.query_one(ProcessTable)
        table.focus()
        await pilot.press("down", "down", "down")
        assert table.cursor_pid == 200
        assert table.cursor_row == 3
        # Job 200 now holds the most GPU memory (moves to the top) and a new job 300 appears above it.
        grown = two_jobs(1_795_000_001.0)
        jobs = (
            replace(grown.processes[0]),
            replace(grown.processes[1], gpu_memory=60 * GIB),
            process(300, gpu_indices=(0,), gpu_memory=70 * GIB),
        )
        source.push(replace(grown, processes=jobs))
        await pilot.pause()
        assert table.pids == [300, 200, 201, 100, 101, 102]
        assert table.cursor_pid == 200
        assert table.cursor_row == 1
        # The job's GPU memory cell was updated in place.
        assert table.get_cell("200", "gpu_memory").plain == "60.0G"
        # A vanished process is removed; the cursor stays on its pid.
        source.push(replace(grown, processes=jobs[1:]))
        await pilot.pause()
        assert table.pids == [300, 200, 201]
        assert table.cursor_pid == 200


async def test_the_table_is_updated_in_place_not_cleared() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.query_one(ProcessTable)
        source.push(two_jobs())
        await pilot.pause()
        cleared: list[bool] = []
        original_clear = DataTable.clear

        def recording_clear(self: DataTable, columns: bool = False) -> DataTable:
            cleared.append(columns)
            return original_clear(self, columns)

        DataTable.clear = recording_clear  # type: ignore[method-assign]
        try:
            source.push(two_jobs(1_795_000_001.0))
            await pilot.pause()
        finally:
            DataTable.clear = original_clear  # type: ignore[method-assign]
        assert cleared == []
        assert table.row_count == 5


async def test_question_mark_opens_help_and_escape_closes_it() -> None:
    app = GpumonApp(FakeSource())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = widget_text(app.screen.query_one("#help-fields"))
        assert "GPU-Util counts time any kernel ran; SM activity counts how many SMs were busy" in " ".join(
            text.split()
        )
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_q_quits_with_return_code_0_and_stops_the_source() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0
    assert source.calls[-1] == "stop"


async def test_gpu_error_shows_one_line_and_the_cpu_pane_keeps_updating() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    error = "NVIDIA driver not found (libnvidia-ml.so.1 missing)"
    async with app.run_test(size=(80, 24)) as pilot:
        first = snapshot(gpus=(), gpu_error=error, cpu=CpuSample(per_core=(10.0, 30.0), total=20.0))
        source.push(first)
        await pilot.pause()
        gpu_text = widget_text(app.query_one(GpuPane)).splitlines()
        assert gpu_text[1:] == [f"GPU: {error}"]
        assert "20%" in widget_text(app.query_one(CpuPane))
        source.push(replace(first, timestamp=first.timestamp + 1, cpu=CpuSample(per_core=(70.0, 90.0), total=80.0)))
        await pilot.pause()
        assert "80%" in widget_text(app.query_one(CpuPane))
        assert widget_text(app.query_one(GpuPane)).splitlines()[1:] == [f"GPU: {error}"]


async def test_sm_and_tensor_rows_only_for_a_gpu_with_gpm() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(80, 40)) as pilot:
        source.push(snapshot(gpus=(gpu(0, gpm=True), gpu(1, gpm=False))))
        await pilot.pause()
        lines = widget_text(app.query_one(GpuPane)).splitlines()
        gpu1 = next(index for index, line in enumerate(lines) if line.startswith("GPU1"))
        assert any(line.startswith("SM act") for line in lines[:gpu1])
        assert any(line.startswith("Tensor") for line in lines[:gpu1])
        assert any(line.startswith("Util") for line in lines[gpu1:])
        assert not any(line.startswith(("SM act", "Tensor")) for line in lines[gpu1:])


async def test_throttling_is_highlighted_but_idle_is_not() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        source.push(snapshot(gpus=(gpu(0, throttle_reasons=("gpu_idle",)),)))
        await pilot.pause()
        assert "throttle:" not in widget_text(app.query_one(GpuPane))
        source.push(snapshot(1_795_000_001.0, gpus=(gpu(0, throttle_reasons=("gpu_idle", "sw_power_cap")),)))
        await pilot.pause()
        assert "throttle: sw_power_cap" in widget_text(app.query_one(GpuPane))


async def test_stale_live_source_is_flagged_from_the_injected_clock() -> None:
    now = [1_795_000_000.0]
    source = FakeSource(live=True)
    app = GpumonApp(source, clock=lambda: now[0])
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(snapshot(timestamp=now[0]))
        await pilot.pause()
        now[0] += 2.0
        app.check_stale()
        assert "STALE" not in app.query_one(TitleBar).title
        now[0] += 30.0
        app.check_stale()
        await pilot.pause()
        assert "STALE" in app.query_one(TitleBar).title
        source.push(snapshot(timestamp=now[0]))
        await pilot.pause()
        assert "STALE" not in app.query_one(TitleBar).title


async def test_a_stalled_live_source_is_flagged_without_a_polling_timer(monkeypatch) -> None:
    """The stale check is a deadline each snapshot moves on: snapshots every 50 ms never trip a 0.2 s threshold, and
    the title says STALE once they stop."""
    monkeypatch.setattr(app_module, "STALE_MIN_SECONDS", 0.2)
    source = FakeSource(live=True, interval=0.01)
    app = GpumonApp(source, clock=time.time)
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(12):
            source.push(snapshot(timestamp=time.time()))
            await pilot.pause(0.05)
            assert "STALE" not in app.query_one(TitleBar).title
        await pilot.pause(0.5)
        assert "STALE" in app.query_one(TitleBar).title
        assert app._stale_deadline is None, "once stale, nothing is left to wake the UI until the next snapshot"
        source.push(snapshot(timestamp=time.time()))
        await pilot.pause()
        assert "STALE" not in app.query_one(TitleBar).title


async def test_command_palette_offers_the_actions() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        source.push(two_jobs())
        await pilot.pause()
        await pilot.press("ctrl+p")
        await pilot.press(*"by pid")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one(ProcessTable).sort_column == "pid"
        await pilot.press("ctrl+p")
        await pilot.press(*"pause")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert source.paused


async def test_everything_fits_80x24_and_panes_sit_side_by_side_at_160x50(recording) -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(*recording[:20])
        await pilot.pause()
        panes = [app.query_one(kind) for kind in (GpuPane, CpuPane, DiskPane, ProcessTable)]
        for pane in panes:
            region = pane.region
            assert region.height > 0 and region.bottom <= 23, pane
            assert region.right <= 80
        # Every pane's content is whole: the GPU pane shows all its gauges, the disks both disks.
        gpu_text = widget_text(panes[0])
        assert all(label in gpu_text for label in ("Util", "Mem", "SM act", "Tensor"))
        disk_names = [disk.name for disk in recording[19].disks]
        assert disk_names and all(name in widget_text(panes[2]) for name in disk_names)
        table = panes[3]
        assert table.row_count == 5
        assert table.region.height >= 2 + table.row_count  # title, header and every row visible
        assert [pane.region.x for pane in panes[:3]] == [0, 0, 0]

        await pilot.resize_terminal(160, 50)
        await pilot.pause()
        gpu_pane, cpu_pane, disk_pane, table = panes
        assert cpu_pane.region.x > gpu_pane.region.right - 2
        assert cpu_pane.region.y == gpu_pane.region.y
        assert disk_pane.region.y > cpu_pane.region.y
        assert [column.label.plain for column in table.columns.values()][-3:] == ["R/s", "W/s", "COMMAND"]
        assert "USER" in [column.label.plain for column in table.columns.values()]
        assert "SM occ" in widget_text(gpu_pane)  # the wide GPU pane shows more gauges


async def test_sparklines_follow_the_width_on_resize(recording) -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(*recording[:100])
        await pilot.pause()
        narrow = _util_line(app)
        await pilot.resize_terminal(120, 24)
        await pilot.pause()
        wide = _util_line(app)
        assert len(narrow) <= 80 < len(wide) <= 120
        # Drawn from the same history: the wider line shows more of it, ending in the same newest samples.
        assert narrow[-20:] == wide[-20:]


def _util_line(app: GpumonApp) -> str:
    return next(line for line in widget_text(app.query_one(GpuPane)).splitlines() if line.startswith("Util"))


def _row_pids(table: ProcessTable) -> list[int]:
    return [table.get_row_at(index)[0].pid for index in range(table.row_count)]


def _graph_cells(pane_text: str) -> str:
    """The graph cells of a GPU pane's text: right of the y-axis."""
    return "".join(
        line[GRAPH_OFFSET:]
        for line in pane_text.splitlines()
        if len(line) > GRAPH_OFFSET and line[GRAPH_OFFSET - 1] in "┤│"
    )


async def test_t_switches_the_gpu_graphs_between_braille_and_blocks() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*(two_jobs(1_795_000_000.0 + index) for index in range(5)))
        await pilot.pause()
        pane = app.query_one(GpuPane)
        braille = widget_text(pane)
        assert any("\u2801" <= char <= "\u28ff" for char in _graph_cells(braille))
        assert not any(char in BLOCKS for char in _graph_cells(braille))
        await pilot.press("t")
        await pilot.pause()
        blocks = widget_text(pane)
        assert pane.graph_style is GraphStyle.BLOCKS
        assert not any("\u2801" <= char <= "\u28ff" for char in _graph_cells(blocks))
        assert "█" in _graph_cells(blocks)
        assert len(blocks.splitlines()) == len(braille.splitlines()), "the same layout, drawn differently"
        await pilot.press("t")
        await pilot.pause()
        assert pane.graph_style is GraphStyle.BRAILLE and widget_text(pane) == braille
