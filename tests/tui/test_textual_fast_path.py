"""The Textual fast path (gpumon.tui._textual_compat) draws what Textual does, on the versions it was checked on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from frames import settle, show
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.pilot import Pilot
from textual.renderables.styled import Styled
from textual.widget import Widget
from textual.widgets import DataTable
from tui_support import FakeSource, frozen_clock

from gpumon.tui import _textual_compat

if not _textual_compat.ACTIVE:
    pytest.skip("the private workarounds are off with this Textual", allow_module_level=True)
from gpumon.tui._textual_compat import fast_path as _textual_fast_path
from gpumon.tui.app import GpumonApp
from gpumon.tui.cached_widgets import CachedContainer, CachedScreen, CachedVertical
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.key_bar import KeyBar
from gpumon.tui.pane import LinesWidget
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.title_bar import TitleBar

pytestmark = pytest.mark.skipif(
    not _textual_compat.ACTIVE, reason="the private workarounds are off with a Textual outside _textual_compat.CHECKED"
)


@asynccontextmanager
async def _replaying(recording, size: tuple[int, int]) -> AsyncIterator[GpumonApp]:
    """The dashboard at `size` after the first four snapshots of a real recording."""
    source = FakeSource(description="replay of test", interval=0.5)
    app = GpumonApp(source, clock=frozen_clock(recording))
    async with app.run_test(size=size) as pilot:
        for shown in recording[:4]:
            await show(pilot, source, shown)
        yield app


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_panes_draw_exactly_what_textuals_styles_cache_draws(recording, size) -> None:
    """LinesWidget.render_lines skips Textual's per-line styling for plain boxes; the lines must not change."""
    async with _replaying(recording, size) as app:
        plain = [pane for pane in app.query(LinesWidget) if pane.plain_box()]
        assert {GpuPane, CpuPane, DiskPane, TitleBar} <= {type(pane) for pane in plain}
        for pane in app.query(LinesWidget):
            whole = Region(0, 0, pane.region.width, pane.region.height)
            drawn = [list(strip) for strip in pane.render_lines(whole)]
            pane._styles_cache.clear()
            expected = [list(strip) for strip in Widget.render_lines(pane, whole)]
            assert drawn == expected, type(pane).__name__


async def test_screen_containers_and_key_bar_draw_their_cached_lines_as_textual_does(recording) -> None:
    """Widgets whose lines are all cached and valid skip render_widget's preamble; what they draw must not change,
    and the cached path must be the one taken once a frame has been drawn."""
    async with _replaying(recording, (160, 50)) as app:
        widgets = [app.screen, app.query_one("#top"), app.query_one("#side"), app.query_one(KeyBar)]
        assert [type(widget) for widget in widgets] == [CachedScreen, CachedContainer, CachedVertical, KeyBar]
        # A frame of the whole screen, drawn here: the dashboard's own partial frames ask a container only for the
        # rows it is the front widget of, so which of its lines are cached depends on which frames ran. Nothing
        # awaited from here on, so nothing can refresh a widget between this frame and the checks.
        app.export_screenshot()
        for widget in widgets:
            whole = Region(0, 0, widget.region.width, widget.region.height)
            cached = _textual_fast_path.cached_lines(widget, whole)
            assert cached is not None, type(widget).__name__
            assert [list(strip) for strip in widget.render_lines(whole)] == [list(strip) for strip in cached]
            widget._styles_cache.clear()
            assert _textual_fast_path.cached_lines(widget, whole) is None
            expected = [list(strip) for strip in Widget.render_lines(widget, whole)]
            assert [list(strip) for strip in cached] == expected, type(widget).__name__
            part = Region(3, 0, 20, 1)
            assert [list(strip) for strip in _textual_fast_path.cached_lines(widget, part) or []] == [
                list(strip) for strip in Widget.render_lines(widget, part)
            ]


def _rich_cell_lines(cell: Text, width: int, padding: int, pre: Style, post: Style) -> list[list[Segment]]:
    """What DataTable._render_cell asks Rich for, for a one-line body cell."""
    console = Console(width=200, color_system="truecolor")
    options = console.options.update_dimensions(width, 1).update(no_wrap=True)
    return console.render_lines(Styled(Padding(cell, (0, padding)), pre_style=pre, post_style=post), options)


@pytest.mark.parametrize("justify", ["left", "right", None])
@pytest.mark.parametrize(
    "content", ["", "42", "12.5%", "7 ", "   ", "python train.py --epochs 90 --batch-size 256", "naïve ✓", "日本語"]
)
@pytest.mark.parametrize("width", [3, 8, 20])
@pytest.mark.parametrize("style", ["bold yellow", ""])
@pytest.mark.parametrize("with_spans", [True, False], ids=["spans", "no spans"])
def test_text_cells_draw_what_rich_draws(justify, content, width, style, with_spans) -> None:
    console = Console(width=200, color_system="truecolor")
    cell = Text(content, style=style, justify=justify, no_wrap=True, overflow="ellipsis", end="")
    if with_spans and len(content) > 3:
        cell.stylize("bright_black", 1, 3)
    pre = Style(color="white", bgcolor="grey11") + Style.from_meta({"row": 3, "column": 2})
    for post in (Style(), Style(reverse=True)):
        expected = _rich_cell_lines(cell, width, 1, pre, post)
        drawn = _textual_fast_path.text_cell_lines(console, cell, width, 1, pre, post)
        if drawn is None:
            assert justify is None and cell.cell_len > width - 2, "only a too-wide unjustified cell is left to Rich"
            continue
        assert drawn == expected
        assert [segment.style.meta for line in drawn for segment in line] == [
            segment.style.meta for line in expected for segment in line
        ]


async def test_process_table_cells_draw_what_datatable_draws(recording) -> None:
    """ProcessTable._render_cell draws one-line cells itself; every cell of a real recording's table, with and
    without the cursor and hover highlight, must come out as DataTable's own rendering."""
    async with _replaying(recording, (160, 50)) as app:
        table = app.query_one(ProcessTable)
        assert table.row_count >= 2
        base = table.rich_style
        compared = 0
        for row in range(table.row_count):
            for column, definition in enumerate(table.ordered_columns):
                width = definition.get_render_width(table)
                for cursor, hover in ((False, False), (True, False), (False, True)):
                    table._cell_render_cache.clear()
                    drawn = table._render_cell(row, column, base, width, cursor, hover)
                    table._cell_render_cache.clear()
                    expected = DataTable._render_cell(table, row, column, base, width, cursor, hover)
                    assert drawn == expected, (row, definition.key)
                    compared += 1
        assert compared >= 2 * 11 * 3


async def test_process_table_body_lines_are_the_lines_datatable_draws(recording) -> None:
    """ProcessTable._render_line assembles a body row's line itself; every line of a real recording's table, cropped
    or not, with the cursor and the hover on one row or another, and the line's mouse meta, must come out as
    DataTable's own."""
    async with _replaying(recording, (160, 50)) as app:
        table = app.query_one(ProcessTable)
        assert table.row_count >= 2
        base = table.rich_style
        width = table.size.width
        compared = 0
        for cursor_row, hover_row in ((0, 1), (1, 0), (1, 1)):
            table.move_cursor(row=cursor_row, animate=False)
            table.hover_coordinate = Coordinate(hover_row, 0)
            table._show_hover_cursor = True
            for y in range(table.header_height + table.row_count):
                for x1, x2 in ((0, width), (5, width - 7)):
                    table._line_cache.clear()
                    table._row_render_cache.clear()
                    drawn = table._render_line(y, x1, x2, base)
                    table._line_cache.clear()
                    table._row_render_cache.clear()
                    expected = DataTable._render_line(table, y, x1, x2, base)
                    assert drawn == expected, (y, x1, x2, cursor_row, hover_row)
                    assert [segment.style.meta if segment.style else None for segment in drawn] == [
                        segment.style.meta if segment.style else None for segment in expected
                    ]
                    compared += y >= table.header_height
        assert table._body_line(table.header_height, 0, width, base) is not None, "the fast path drew the body"
        assert compared >= 3 * 2 * 2


async def test_process_table_render_line_reads_the_style_once_and_draws_what_datatable_draws(recording) -> None:
    """ProcessTable.render_line uses the style render_lines read once; each line, scrolled or not, must be
    DataTable.render_line's."""
    async with _replaying(recording, (160, 50)) as app:
        table = app.query_one(ProcessTable)
        for scroll_x in (0, 4):
            table.scroll_to(x=scroll_x, animate=False)
            for y in range(table.header_height + table.row_count + 1):
                table._frame_style = table.rich_style
                drawn = table.render_line(y)
                table._frame_style = None
                table._line_cache.clear()
                table._row_render_cache.clear()
                assert drawn == DataTable.render_line(table, y), (scroll_x, y)
        whole = table.region.reset_offset
        table.render_lines(whole)
        assert table._frame_style is None, "the style is read again on the next render_lines call"


async def test_process_table_in_a_plain_box_draws_what_styles_cache_draws(recording) -> None:
    """ProcessTable.render_lines draws a plain-box table without StylesCache; focused (a background tint) or not,
    whole or cropped, its lines must be those Textual draws."""
    async with _replaying(recording, (160, 50)) as app:
        table = app.query_one(ProcessTable)
        assert _textual_fast_path.plain_box(table)
        for focused in (False, True):
            if focused:
                table.focus()
            else:
                app.set_focus(None)
            await settle(Pilot(app))  # the focus change's restyle and repaint
            whole = table.region.reset_offset
            for crop in (whole, Region(0, 1, whole.width, 2), Region(3, 0, 30, whole.height)):
                drawn = [list(strip) for strip in table.render_lines(crop)]
                table._styles_cache.clear()
                table._line_cache.clear()
                expected = [list(strip) for strip in DataTable.render_lines(table, crop)]
                assert drawn == expected, (focused, crop)


async def test_process_table_refreshes_changed_rows_as_refresh_row_does(recording) -> None:
    """replace_cells refreshes the changed rows in one call; it must mark the regions DataTable.refresh_row marks."""
    async with _replaying(recording, (160, 50)) as app:
        table = app.query_one(ProcessTable)
        keys = {table._row_locations.get_key(index) for index in range(table.row_count)}
        assert len(keys) >= 2
        table._repaint_regions.clear()
        table._refresh_rows(keys)
        batched = set(table._repaint_regions)
        table._repaint_regions.clear()
        for key in keys:
            table.refresh_row(table._row_locations.get(key))
        assert batched == set(table._repaint_regions) and batched


async def test_cached_lines_follow_a_theme_or_style_change(recording) -> None:
    """cached_lines keeps its filtered lines while StylesCache's lines are the same objects: a new theme, or a new
    style of the widget's own, must still come out as Textual draws it."""
    async with _replaying(recording, (160, 50)) as app:
        pilot = Pilot(app)
        widgets = [app.screen, app.query_one("#top"), app.query_one("#side"), app.query_one(KeyBar)]
        for theme in ("textual-light", "nord", "textual-dark"):
            app.export_screenshot()  # a frame of the whole screen: every line of every widget cached
            for widget in widgets:  # kept, for the whole widget, under the theme before
                assert _textual_fast_path.cached_lines(widget, widget.region.reset_offset) is not None
            app.theme = theme
            await settle(pilot)  # the stylesheet update and the repaint
            for widget in widgets:
                whole = widget.region.reset_offset
                drawn = [list(strip) for strip in widget.render_lines(whole)]
                widget._styles_cache.clear()
                assert drawn == [list(strip) for strip in Widget.render_lines(widget, whole)], (theme, widget)
        await settle(pilot)
        for widget in widgets:  # a style of the widget's own, with the same filters: new cached lines
            widget.render_lines(widget.region.reset_offset)
            assert _textual_fast_path.cached_lines(widget, widget.region.reset_offset) is not None, widget
            widget.styles.background = "darkred"
        await settle(pilot)
        for widget in widgets:
            whole = widget.region.reset_offset
            drawn = [list(strip) for strip in widget.render_lines(whole)]
            widget._styles_cache.clear()
            assert drawn == [list(strip) for strip in Widget.render_lines(widget, whole)], widget
