"""The dashboard's layout: no blank rows at 160x50 and 220x60 for 1, 2, 4 and 8 GPUs, the health badge
at every size with the detail on `e`, time-axis labels beside event marks, a paused pane's title after a resize,
and the ASCII fallback. Fed from the real recordings (4 and 8 GPUs: tests/fixtures/make_many_gpus.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPOSITORY
from screen_text import blank_rows, screen_rows
from tui_support import FakeSource, frozen_clock

from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import GpuSample, MigSample, Snapshot, XidEvent
from gpumon.tui.app import GpumonApp
from gpumon.tui.glyphs import wants_ascii
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.graph import time_axis
from gpumon.tui.health_screen import HealthScreen
from gpumon.tui.view_options import ViewOptions

RECORDINGS = REPOSITORY / "assets" / "recordings"
FIXTURES = REPOSITORY / "tests" / "fixtures"
VIEWS = {
    1: RECORDINGS / "h200-training-health.jsonl",
    2: RECORDINGS / "h200x2-tests.jsonl",
    4: FIXTURES / "gpus4.jsonl",
    8: FIXTURES / "gpus8.jsonl",
}
SHOWN = 57
"""Samples fed: the 2-GPU recording's first 57 s end with its two DDP ranks busy (conftest.TWO_GPU_SHOWN)."""


def view(gpus: int) -> list[Snapshot]:
    return read_recording(VIEWS[gpus])[:SHOWN]


async def shown(app: GpumonApp, source: FakeSource, snapshots: list[Snapshot], pilot: object) -> None:
    source.push(*snapshots)
    await pilot.pause()  # type: ignore[attr-defined]
    await pilot.pause()  # type: ignore[attr-defined]


def divider(app: GpumonApp) -> int | None:
    side = app.query_one("#side")
    return side.region.x if app._wide and side.display else None


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("size", [(160, 50), (220, 60)], ids=lambda size: f"{size[0]}x{size[1]}")
async def test_no_blank_rows_on_wide_terminals(gpus: int, size: tuple[int, int]) -> None:
    snapshots = view(gpus)
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=size) as pilot:
        await shown(app, source, snapshots, pilot)
        rows = screen_rows(app)
        assert len(rows) == size[1]
        blank = blank_rows(rows, divider(app))
        assert not blank, "blank rows:\n" + "\n".join(f"{index:2d}|{rows[index]}" for index in blank)
        assert app.query_one(GpuPane).region.bottom <= app.query_one("#processes").region.y, "nothing overflows"


def test_blank_rows_are_told_from_graph_rows_and_the_divider() -> None:
    rows = ["GPU0 H200", " " * 9, "────│────", "    │    ", "  0┤·····", "   │  ⣿  "]
    assert blank_rows(rows, 4) == [1, 2, 3]
    assert blank_rows(rows, None) == [1]


async def test_eight_gpus_at_160x50_keep_two_graph_rows_and_a_health_badge_each() -> None:
    snapshots = view(8)
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(160, 50)) as pilot:
        await shown(app, source, snapshots, pilot)
        lines = [line.plain for line in app.query_one(GpuPane).lines(app.query_one(GpuPane).size.width)]
        summaries = [index for index, line in enumerate(lines) if line[:2] in {f"{i} " for i in range(8)}]
        assert len(summaries) == 8
        for gpu, (start, end) in enumerate(zip(summaries, [*summaries[1:], len(lines)], strict=True)):
            assert "health ok" in lines[start] or "health N/A" in lines[start], f"GPU{gpu}'s badge"
            graph_rows = lines[start + 1 : end]
            assert len(graph_rows) >= 2 and graph_rows[0].startswith("  U "), f"GPU{gpu}: two graph rows or more"
        with_health = [gpu for gpu in snapshots[-1].gpus if gpu.energy_total is not None]
        assert sum("health ok" in lines[index] for index in summaries) == len(with_health)


def troubled(gpu: GpuSample) -> GpuSample:
    """A real sample with every problem the badge tells of."""
    return replace(
        gpu,
        xid_events=(XidEvent(timestamp=1_795_661_200.0, xid=79),),
        ecc_uncorrected_volatile=2,
        remapped_rows_failed=True,
        pcie_link_width=8,
        pcie_link_width_max=16,
        throttle_reasons=("hw_thermal",),
        mig_mode=True,
        mig_instances=(MigSample(index=0, name="NVIDIA H200 MIG 1g.18gb", memory_used=0, memory_total=18 << 30),),
    )


BADGE = ("XID 79", "ECC 2", "remap FAILED", "PCIe x8/16", "thermal", "MIG 1")


@pytest.mark.parametrize("gpus", [1, 2, 8])
async def test_the_health_badge_survives_80x24(gpus: int) -> None:
    snapshots = view(gpus)
    last = snapshots[-1]
    snapshots[-1] = replace(last, gpus=(troubled(last.gpus[0]), *last.gpus[1:]))
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(80, 24)) as pilot:
        await shown(app, source, snapshots, pilot)
        screen = "\n".join(screen_rows(app))
        for item in BADGE:
            assert item in screen, item
        if gpus > 1:
            assert screen.count("health ok") >= 1, "the other GPUs' badges"


async def test_e_shows_every_health_figure_and_closes() -> None:
    snapshots = view(2)
    last = snapshots[-1]
    snapshots[-1] = replace(last, gpus=(troubled(last.gpus[0]), last.gpus[1]))
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(120, 60)) as pilot:
        await shown(app, source, snapshots, pilot)
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, HealthScreen)
        screen = "\n".join(screen_rows(app))
        for item in ("GPU0 H200", "GPU1 H200", "XID 79 at", "ECC 0/2", "remap 0/0 FAILED", "PCIe Gen5x8/5x16"):
            assert item in screen, item
        assert "clocks held by hw_thermal" in screen and "1g.18gb" in screen
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HealthScreen)


def test_event_marks_leave_the_time_axis_labels_whole() -> None:
    width = 80
    clear = time_axis(width, 1.0, 0.0).plain
    labels = ["-1m20s", "-1m", "-40s", "-20s", "now"]
    assert all(label in clear for label in labels)
    marks: list[tuple[str, str] | None] = [None] * width
    for label in labels:  # a mark on a cell of every label, as a process starting there would put it
        marks[clear.index(label) + 1] = ("▴", "bold green")
    axis = time_axis(width, 1.0, 0.0, marks).plain
    assert [index for index, cell in enumerate(axis) if cell == "▴"] == [
        index for index, mark in enumerate(marks) if mark
    ], "every mark where it happened"
    kept = [label for label in labels if label in axis]
    assert len(kept) >= 4 and "now" in axis, f"the labels move aside, whole: {axis}"
    assert axis.count("-") + axis.count("now") >= len(kept)


async def test_a_paused_pane_retitles_itself_after_a_resize() -> None:
    snapshots = view(8)
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(160, 50)) as pilot:
        await shown(app, source, snapshots, pilot)
        await pilot.press("p")
        pane = app.query_one(GpuPane)
        before = str(pane.border_title)
        assert "graphs: last" in before
        await pilot.resize_terminal(220, 60)
        await pilot.pause()
        await pilot.pause()
        after = str(pane.border_title)
    fresh_source = FakeSource(interval=1.0)
    fresh = GpumonApp(fresh_source, clock=frozen_clock(snapshots))
    async with fresh.run_test(size=(220, 60)) as pilot:
        await shown(fresh, fresh_source, snapshots, pilot)
        expected = str(fresh.query_one(GpuPane).border_title)
    assert expected != before, "the span differs at the new width"
    assert after == expected


BRAILLE_AND_BLOCKS = [(0x2800, 0x28FF), (0x2580, 0x259F), (0x25A0, 0x25FF)]
"""Braille, block elements (eighths) and geometric shapes (▴ ▾): what a Linux console or a non-UTF-8 locale lacks."""


async def test_ascii_draws_graphs_sparklines_and_bars_without_braille_or_blocks() -> None:
    snapshots = view(2)
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots), options=ViewOptions(ascii=True))
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await shown(app, source, snapshots, pilot)
            drawn = "\n".join(
                line.plain
                for pane in ("#gpu", "#cpu", "#disk")
                for line in app.query_one(pane).lines(app.query_one(pane).size.width)  # type: ignore[attr-defined]
            )
            assert "#" in drawn and "_" in drawn, "graphs and bars drawn in ASCII"
            foreign = {char for char in drawn if any(low <= ord(char) <= high for low, high in BRAILLE_AND_BLOCKS)}
            assert not foreign
    finally:
        GpumonApp(FakeSource())  # back to Unicode for the tests after this one


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"TERM": "linux", "LANG": "en_US.UTF-8"}, True),
        ({"TERM": "xterm-256color", "LANG": "en_US.ISO-8859-1"}, True),
        ({"TERM": "xterm-256color", "LANG": "C"}, True),
        ({"TERM": "xterm-256color", "LANG": "en_US.UTF-8"}, False),
        ({"TERM": "xterm-256color", "LC_ALL": "de_DE.utf8", "LANG": "C"}, False),
        ({"TERM": "xterm-256color", "LC_CTYPE": "POSIX", "LANG": "en_US.UTF-8"}, True),
        ({"TERM": "xterm-256color"}, False),
    ],
)
def test_ascii_is_chosen_where_the_terminal_cannot_show_more(environ: dict[str, str], expected: bool) -> None:
    assert wants_ascii(environ) is expected


def test_the_fixture_views_are_the_recordings_gpus(tmp_path: Path) -> None:
    eight = read_recording(VIEWS[8])
    two = read_recording(VIEWS[2])
    assert [gpu.uuid for gpu in eight[0].gpus[:2]] == [gpu.uuid for gpu in two[0].gpus]
    assert eight[10].gpus[0].utilization_gpu == two[10].gpus[0].utilization_gpu
    assert [gpu.index for gpu in eight[0].gpus] == list(range(8))


def test_ascii_on_the_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import argparse

    from gpumon.cli.dashboard import add_dashboard_arguments, view_options

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_CTYPE", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    parser = argparse.ArgumentParser()
    add_dashboard_arguments(parser)
    assert view_options(parser.parse_args(["--ascii"])).ascii
    assert not view_options(parser.parse_args([])).ascii
    monkeypatch.setenv("TERM", "linux")
    assert view_options(parser.parse_args([])).ascii
