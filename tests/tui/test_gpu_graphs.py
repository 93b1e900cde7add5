"""The GPU pane's history graphs: braille and block cells, kept between redraws, filling the pane, the time axis and
its event marks, scrolling back while paused; and a process's SM% on several GPUs."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from tui_support import FakeSource, frozen_clock, gpu, process, snapshot, widget_text

from gpumon.config import Settings
from gpumon.sampling.history import PROCESS_ENDED, PROCESS_STARTED, THROTTLED, History
from gpumon.sampling.nvml import GpuProcess
from gpumon.sampling.processes import ProcessCollector
from gpumon.sampling.snapshot import Snapshot
from gpumon.tui.app import GpumonApp
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.gpu_pane import GRAPH_OFFSET, GpuPane
from gpumon.tui.graph import NO_DATA, Graph, GraphStyle, column, height, window_for
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.view_options import ViewOptions


def with_gpus(snapshots: list[Snapshot], count: int) -> list[Snapshot]:
    """The recording's GPU copied to `count` GPUs (the recordings at hand have one)."""
    return [
        replace(shown, gpus=tuple(replace(shown.gpus[0], index=index, uuid=f"GPU-{index}") for index in range(count)))
        for shown in snapshots
    ]


def graph_rows(pane_text: str, label: str) -> list[str]:
    """The graph cells of one gauge's rows: from its label's line down to its y-axis' bottom mark."""
    lines = pane_text.splitlines()
    first = next(index for index, line in enumerate(lines) if line.startswith(label))
    last = next(
        index for index in range(first, len(lines)) if lines[index][GRAPH_OFFSET - 4 : GRAPH_OFFSET] in ("  0┤", "   ┤")
    )
    return [line[GRAPH_OFFSET:] for line in lines[first : last + 1]]


def test_braille_cells_stack_two_samples_four_levels_a_row_and_blocks_eight() -> None:
    braille, blocks = GraphStyle.BRAILLE, GraphStyle.BLOCKS
    empty, zero, full = height(None, 1, braille), height(0.0, 1, braille), height(100.0, 1, braille)
    assert (empty, zero, full) == (0, 1, 4)
    assert column(braille, 1, (full, full)) == ("⣿",)
    assert column(braille, 1, (zero, empty)) == ("⡀",) and column(braille, 1, (empty, zero)) == ("⢀",)
    assert column(braille, 1, (empty, empty)) == (" ",)
    # 50% of 2 rows is 5 of 8 levels: the bottom row full, one dot of the top row.
    assert column(braille, 2, (height(100.0, 2, braille), height(50.0, 2, braille))) == ("⣇", "⣿")
    assert height(150.0, 2, blocks) == 16 and height(-5.0, 2, blocks) == 1
    assert column(blocks, 2, (height(50.0, 2, blocks),)) == ("▁", "█")
    assert column(blocks, 2, (height(100.0, 2, blocks),)) == ("█", "█")


@pytest.mark.parametrize("samples_per_dot", [1, 2])
@pytest.mark.parametrize("style", list(GraphStyle))
def test_a_graph_moved_on_a_few_samples_at_a_time_matches_a_fresh_drawing(
    style: GraphStyle, samples_per_dot: int
) -> None:
    series = [float((index * 37) % 113) - 5.0 for index in range(120)]
    series[40:43] = [float("nan")] * 3
    history = History(seconds=5.0, fastest_interval=0.1)  # 50 samples kept: the oldest fall out along the way
    kept = Graph(style, 3)
    width = 17 if samples_per_dot == 1 else 12  # within the 50 samples kept (a cell drawn is never drawn again)
    index = 0
    for step in [1] * 60 + [2, 3, 1, 5, 1, 1, 7] * 7:
        for value in series[index : index + step]:
            history.add(snapshot(1_795_000_000.0 + index, gpus=(gpu(0, utilization_gpu=value),)))
        index += step
        window = window_for(history, style, width, samples_per_dot=samples_per_dot)
        expected = Graph(style, 3).lines(history, "gpu0.utilization_gpu", window)
        assert kept.lines(history, "gpu0.utilization_gpu", window) == expected, index
        assert all(len(line) == width for line in expected)
        if index >= len(series):
            break


def test_whole_cells_draw_a_braille_cell_once_both_its_samples_are_in() -> None:
    history = History(seconds=60.0, fastest_interval=1.0)
    drawn: list[tuple[list[str], list[str]]] = []
    for index in range(7):
        history.add(snapshot(1_795_000_000.0 + index, gpus=(gpu(0, utilization_gpu=90.0 if index % 2 else 30.0),)))
        whole = window_for(history, GraphStyle.BRAILLE, 10, whole_cells=True)
        half = window_for(history, GraphStyle.BRAILLE, 10)
        assert whole.end == (index + 1) // 2 * 2 and half.end == index + 1
        key = "gpu0.utilization_gpu"
        drawn.append(
            (
                Graph(GraphStyle.BRAILLE, 2).lines(history, key, whole),
                Graph(GraphStyle.BRAILLE, 2).lines(history, key, half),
            )
        )
    assert drawn[4][0] == drawn[3][0] and drawn[4][1] != drawn[3][1], "the fifth sample waits for the sixth"
    assert drawn[5][0] == drawn[5][1], "a full cell is drawn the same either way"
    assert window_for(history, GraphStyle.BLOCKS, 10, whole_cells=True).end == 7, "a block cell is one sample"


@pytest.mark.parametrize("style", list(GraphStyle))
def test_a_coarser_graph_draws_the_mean_of_each_pair_of_samples_and_moves_half_as_often(style: GraphStyle) -> None:
    series = [10.0, 50.0, 90.0, float("nan"), 20.0, 40.0, 0.0, 100.0, 70.0, 30.0, 60.0, 80.0]
    fine, coarse = History(seconds=60.0, fastest_interval=1.0), History(seconds=60.0, fastest_interval=1.0)
    for index, value in enumerate(series):
        fine.add(snapshot(1_795_000_000.0 + index, gpus=(gpu(0, utilization_gpu=value),)))
    means = [30.0, 90.0, 30.0, 50.0, 50.0, 70.0]  # a missing sample leaves the other of its pair
    for index, value in enumerate(means):
        coarse.add(snapshot(1_795_000_000.0 + index, gpus=(gpu(0, utilization_gpu=value),)))
    key = "gpu0.utilization_gpu"
    drawn = Graph(style, 4).lines(fine, key, window_for(fine, style, 5, samples_per_dot=2))
    assert drawn == Graph(style, 4).lines(coarse, key, window_for(coarse, style, 5))
    whole = [window_for(fine, style, 5, skip=skip, whole_cells=True, samples_per_dot=2).end for skip in range(5)]
    spc = 2 * style.samples_per_cell
    assert whole == [(len(series) - skip) // spc * spc for skip in range(5)], "a whole cell is spc samples"


def test_history_reads_samples_by_absolute_index_and_marks_gpu_events() -> None:
    history = History(seconds=1.0, fastest_interval=0.1)
    worker = process(7, gpu_indices=(0,))
    steps = [
        snapshot(1.0, processes=()),
        snapshot(2.0, processes=(worker,)),
        snapshot(3.0, processes=(worker,), gpus=(gpu(0, throttle_reasons=("gpu_idle",)),)),
        snapshot(4.0, processes=(), gpus=(gpu(0, throttle_reasons=("hw_thermal",)),)),
    ]
    for step in steps:
        history.add(step)
    assert history.between("gpu0.events", 0, 4) == [0.0, PROCESS_STARTED, 0.0, PROCESS_ENDED | THROTTLED]
    for index in range(5, 15):
        history.add(snapshot(float(index)))
    assert history.added == 14 and len(history) == 10
    assert history.between("gpu0.events", 2, 5) == [None, None, 0.0], "samples 2 and 3 fell out of the buffer"
    assert history.between("gpu0.events", 13, 16) == [0.0, None, None], "not recorded yet"
    assert history.between("no.such.metric", 0, 2) == [None, None]


@pytest.mark.parametrize("gpus", [1, 2])
async def test_at_160x50_utilization_and_memory_graphs_fill_80_cells_by_4_rows(recording, gpus: int) -> None:
    snapshots = with_gpus(recording[:100], gpus)
    source = FakeSource(description="replay", interval=0.5)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*snapshots)
        await pilot.pause()
        text = widget_text(app.query_one(GpuPane))
        for label in ("Util", "Mem "):
            rows = graph_rows(text, label)
            assert len(rows) >= 4, label
            assert len(rows[-1]) >= 80, "the bottom row is drawn across: samples, or dots where none are yet"
            assert sum(char not in " " + NO_DATA for char in "".join(rows)) >= 40, "the samples are drawn"
        axes = [line.split("└")[1] for line in text.splitlines() if "└" in line]
        assert len(axes) == gpus and all(len(axis) >= 80 for axis in axes), "a time axis per GPU, as wide"
        table = app.query_one(ProcessTable)
        assert table.row_count and table.region.height >= 2 + table.row_count, "the table shows every process"


async def test_a_fresh_start_shows_the_span_to_fill_on_the_time_axis() -> None:
    source = FakeSource(interval=0.5)
    app = GpumonApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*(snapshot(1_795_000_000.0 + index * 0.5) for index in range(3)))
        await pilot.pause()
        text = widget_text(app.query_one(GpuPane))
        axis = next(line for line in text.splitlines() if "└" in line)
        # 80 cells of two samples 0.5 s apart: 80 s, of which 1.5 s are drawn, the rest a dotted baseline.
        assert axis.split("└")[1].startswith("-1m20s") and axis.endswith("now") and "-40s" in axis
        util = graph_rows(text, "Util")
        assert util[-1].startswith(NO_DATA * 70) and util[-1][-2:].strip()


@pytest.mark.parametrize(("interval", "whole_cells"), [(0.25, True), (1.0, True), (2.0, False)])
async def test_graphs_move_a_whole_cell_at_a_time_when_sampling_once_a_second_or_faster(
    interval: float, whole_cells: bool
) -> None:
    source = FakeSource(interval=interval)
    app = GpumonApp(source)
    ramp = [
        snapshot(1_795_000_000.0 + index * interval, gpus=(gpu(0, utilization_gpu=float(index * 9)),))
        for index in range(11)
    ]
    async with app.run_test(size=(160, 50)) as pilot:
        rows = []
        for shown in ramp[8:]:
            source.push(*([*ramp[:8], shown] if shown is ramp[8] else [shown]))
            await pilot.pause()
            rows.append(graph_rows(widget_text(app.query_one(GpuPane)), "Util"))
        assert app.query_one(GpuPane).whole_cells is whole_cells
        assert rows[0] != rows[1], "the 10th sample completes a cell: drawn either way"
        assert (rows[1] == rows[2]) is whole_cells, "the 11th sample half a cell: drawn at once, or with the 12th"


async def test_arrows_scroll_the_graphs_back_while_paused_and_only_then() -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source)
    ramp = [
        snapshot(1_795_000_000.0 + index, gpus=(gpu(0, utilization_gpu=float(index % 100)),)) for index in range(700)
    ]
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*ramp)
        await pilot.pause()
        pane = app.query_one(GpuPane)
        newest = widget_text(pane)
        await pilot.press("left")
        await pilot.pause()
        assert widget_text(pane) == newest and pane.scrolled_back == 0, "not paused: the arrows are the table's"
        await pilot.press("p", "left", "left")
        await pilot.pause()
        back = widget_text(pane)
        axis = next(line for line in back.splitlines() if "└" in line)
        assert pane.scrolled_back == 80 and axis.endswith("-1m20s") and "back" in str(pane.border_title)
        assert graph_rows(back, "Util") != graph_rows(newest, "Util")
        for _ in range(40):
            await pilot.press("left")
        await pilot.pause()
        assert 600 <= pane.scrolled_back < 700, "as far back as the history goes (ten minutes here), no further"
        await pilot.press("right")
        await pilot.pause()
        assert pane.scrolled_back < 600
        await pilot.press("end")
        await pilot.pause()
        assert pane.scrolled_back == 0 and widget_text(pane) == newest
        await pilot.press("left", "p")
        await pilot.pause()
        assert pane.scrolled_back == 0, "resuming returns to the newest samples"


async def test_process_start_end_and_throttling_are_marked_on_the_time_axis() -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source)
    job = process(10, gpu_indices=(0,))
    steps = [
        snapshot(
            1_795_000_000.0 + index,
            processes=(job,) if 10 <= index < 30 else (),
            gpus=(gpu(0, throttle_reasons=("sw_power_cap",) if 50 <= index < 54 else ()),),
        )
        for index in range(60)
    ]
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*steps)
        await pilot.pause()
        axis = next(line for line in widget_text(app.query_one(GpuPane)).splitlines() if "└" in line)
        graph = axis.split("└")[1]
        # Two samples a cell: sample i of 60 is in cell 80 - 30 + i // 2.
        assert graph[50 + 5] == "▴" and graph[50 + 15] == "▾"
        assert graph[50 + 25 : 50 + 27] == "!!"


async def test_eight_gpus_at_160x50_each_get_graphs_two_rows_tall_or_more() -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source)
    eight = [
        snapshot(1_795_000_000.0 + index, gpus=tuple(gpu(i, utilization_gpu=10.0 * i) for i in range(8)))
        for index in range(30)
    ]
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*eight)
        await pilot.pause()
        lines = widget_text(app.query_one(GpuPane)).splitlines()[1:]
        tops = [index for index, line in enumerate(lines) if line.startswith("  U ")]
        assert len(tops) == 8
        for top in tops:
            rows = [lines[top][4:].split("  M ")[0], *(line[4:].split("  │ ")[0] for line in lines[top + 1 : top + 2])]
            assert lines[top + 1].startswith("  │ "), "a second row under the label"
            assert all(len(row) >= 15 for row in rows), "15+ cells of graph each"
        assert "graphs: last" in str(app.query_one(GpuPane).border_title)


async def test_a_process_on_two_gpus_shows_its_mean_sm_percent_never_above_100() -> None:
    me = os.getpid()
    nvml = [
        GpuProcess(pid=me, gpu_index=0, used_memory=1 << 30, sm_percent=90.0),
        GpuProcess(pid=me, gpu_index=1, used_memory=1 << 30, sm_percent=97.0),
    ]
    (sampled,) = ProcessCollector().collect(nvml)
    assert sampled.gpu_indices == (0, 1) and sampled.sm_percent == pytest.approx(93.5)
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(snapshot(gpus=(gpu(0), gpu(1)), processes=(sampled,)))
        await pilot.pause()
        row = app.query_one(ProcessTable).get_row_at(0)
        cells = [cell.plain.strip() for cell in row[1:]]
        assert "94" in cells and "187" not in cells


@pytest.mark.parametrize("size", [(160, 50), (220, 60)])
async def test_the_side_column_is_filled_by_cpu_and_memory_graphs_down_to_the_gpu_panes_bottom(
    recording, size: tuple[int, int]
) -> None:
    snapshots = recording[:100]
    source = FakeSource(description="replay", interval=0.5)
    app = GpumonApp(source, clock=frozen_clock(snapshots), options=ViewOptions(Settings(host_graphs=True)))
    async with app.run_test(size=size) as pilot:
        source.push(*snapshots)
        await pilot.pause()
        gpu_pane, cpu_pane, disk_pane = app.query_one(GpuPane), app.query_one(CpuPane), app.query_one(DiskPane)
        side_bottom = disk_pane.region.bottom
        assert gpu_pane.region.bottom - 2 <= side_bottom <= gpu_pane.region.bottom, "no blank block under the side"
        text = widget_text(cpu_pane)
        rows = graph_rows(text, "CPU")
        assert len(rows) >= 8, "the CPU graph takes most of the room"
        drawn = "".join(rows)
        assert sum(char not in " " + NO_DATA for char in drawn) >= 40, "the CPU history is drawn"
        assert len(graph_rows(text, "Mem ")) >= 2
        assert any("└" in line and line.rstrip().endswith("now") for line in text.splitlines()), "a time axis"


async def test_h_hides_and_shows_the_host_graphs_which_are_on_by_default(recording) -> None:
    snapshots = recording[:40]
    source = FakeSource(description="replay", interval=0.5)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*snapshots)
        await pilot.pause()
        pane = app.query_one(CpuPane)
        has_axis = lambda: any("└" in line for line in widget_text(pane).splitlines())  # noqa: E731
        assert has_axis() and len(graph_rows(widget_text(pane), "CPU")) >= 8
        await pilot.press("h")
        await pilot.pause()
        assert not has_axis() and widget_text(pane).splitlines()[1].startswith("CPU ")
        await pilot.press("h")
        await pilot.pause()
        assert has_axis()


async def test_a_narrow_terminal_keeps_the_one_line_cpu_history() -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, options=ViewOptions(Settings(host_graphs=True)))
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(snapshot(1_795_000_000.0), snapshot(1_795_000_001.0))
        await pilot.pause()
        text = widget_text(app.query_one(CpuPane))
        assert not any("└" in line for line in text.splitlines()), "stacked under the GPU pane: no room for graphs"
        assert text.splitlines()[1].startswith("CPU "), "the total CPU line with its sparkline"
