"""Incremental redraws draw what a full redraw would: panes and process table updated snapshot by snapshot end on
the same screen as a fresh app that shows only the last snapshot (catches stale line and cell caches)."""

from __future__ import annotations

import html
import itertools
import re
from dataclasses import replace

import pytest
from tui_support import FakeSource, frozen_clock, process, snapshot

from gpumon.sampling.snapshot import ProcessSample, Snapshot
from gpumon.tui.app import GpumonApp
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.sparkline import BLOCKS, spark_string


async def screen_after(
    snapshots: list[Snapshot], size: tuple[int, int], *, one_by_one: bool, cursor_row: int = 0
) -> str:
    """The screenshot (SVG) after showing `snapshots`, one redraw each or a single redraw of the last."""
    source = FakeSource(description="replay of test", interval=0.5)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if one_by_one:
            source.push(snapshots[0])
            await pilot.pause()
            app.query_one(ProcessTable).move_cursor(row=cursor_row, animate=False)
            for shown in snapshots[1:]:
                source.push(shown)
                await pilot.pause()
        else:
            source.push(*snapshots)
            await pilot.pause()
            app.query_one(ProcessTable).move_cursor(row=cursor_row, animate=False)
            await pilot.pause()
        return app.export_screenshot()


def what_it_shows(svg: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str, float]]]:
    """A screenshot as what a person sees: each text run (row, x, its style, its text), each row's background as runs
    of one colour, adjacent pieces of one colour merged (Textual may split a blank stretch differently from one
    redraw to the next; that shows the same)."""
    styles = dict(re.findall(r"\.(terminal-\d+-r\d+) \{ ([^}]*) \}", svg))
    texts = [
        (y, x, styles.get(name, ""), html.unescape(text))
        for name, x, y, text in re.findall(
            r'<text class="(terminal-\d+-r\d+)" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg
        )
    ]
    runs: list[tuple[str, str, str, float]] = []
    rects = re.findall(r'<rect fill="(#[0-9a-f]+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"', svg)
    for fill, x, y, width in sorted(rects, key=lambda r: (float(r[2]), float(r[1]))):
        last = runs[-1] if runs else None
        if last and last[0] == y and last[2] == fill and abs(float(last[1]) + last[3] - float(x)) < 0.5:
            runs[-1] = (y, last[1], fill, last[3] + float(width))
        else:
            runs.append((y, x, fill, float(width)))
    return sorted(texts), [(y, x, fill, round(width, 1)) for y, x, fill, width in runs]


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_recording_shown_one_by_one_ends_like_a_single_redraw(recording, size) -> None:
    snapshots = recording[:30]
    assert any(a.processes != b.processes for a, b in itertools.pairwise(snapshots)), "the table must change"
    incremental = await screen_after(snapshots, size, one_by_one=True)
    assert what_it_shows(incremental) == what_it_shows(await screen_after(snapshots, size, one_by_one=False))


def _job(cpu: float, rss: float, worker_cpus: tuple[float, ...], state: str = "running") -> ProcessSample:
    workers = tuple(process(200 + index, cpu_percent=value, state=state) for index, value in enumerate(worker_cpus))
    return process(100, gpu_indices=(0,), gpu_memory=10 * 1024**3, cpu_percent=cpu, rss=rss, children=workers)


async def test_changed_cells_under_the_cursor_and_added_rows_redraw_like_a_fresh_table() -> None:
    gib = 1024**3
    steps = [
        (_job(90.0, 2 * gib, (10.0, 20.0)),),
        (_job(91.0, 2 * gib, (10.0, 35.0)),),  # the cursor row's CPU% changes
        (_job(91.0, 3 * gib, (12.0, 35.0), state="disk-sleep"),),  # RSS, CPU% and a styled state cell
        (_job(95.0, 3 * gib, (12.0, 35.0, 5.0)),),  # a worker appears
        (_job(95.0, 3 * gib, (12.0, 36.0, 5.0)),),
    ]
    snapshots = [
        replace(snapshot(timestamp=1_795_000_000.0 + index), processes=processes)
        for index, processes in enumerate(steps)
    ]
    incremental = await screen_after(snapshots, (120, 30), one_by_one=True, cursor_row=2)
    fresh = await screen_after(snapshots, (120, 30), one_by_one=False, cursor_row=2)
    assert what_it_shows(incremental) == what_it_shows(fresh)


def test_sparklines_of_a_series_advancing_one_sample_at_a_time_match_a_fresh_drawing() -> None:
    # spark_string reuses the previous sparkline's cells when the window moved by one sample; check every step
    # against the scale computed here, including gaps (None), values off the scale and a window that jumps back.
    def expected(window: list[float | None], width: int, maximum: float) -> str:
        cells = [
            " " if value is None else BLOCKS[int(min(1.0, max(0.0, value / maximum)) * 7 + 0.5)]
            for value in window[-width:]
        ]
        return " " * (width - len(cells)) + "".join(cells)

    series: list[float | None] = [float((index * 37) % 113) - 5.0 for index in range(150)]
    series[40:43] = [None, None, None]
    for maximum in (100.0, 50.0):
        for end in [*range(1, 150), *range(60, 90)]:
            window = series[:end]
            assert spark_string(window, 30, maximum=maximum) == expected(window, 30, maximum), (maximum, end)
