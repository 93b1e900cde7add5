"""ProcessTable's DataTable internals (checked on the Textual versions gpumon.tui._textual_compat.CHECKED names):
one-line cells drawn without Rich's renderable pipeline, body rows assembled without DataTable's per-row
bookkeeping, and changed cells replaced without emptying every cache.

It overrides DataTable's `render_lines`, `render_line` (the widget's style read once per call, not per line),
`_render_cell` and `_render_line`, refreshes changed rows as `refresh_row` and `_refresh_region` would but in one
`refresh` (where every row is one line tall), and reads its `_row_locations`, `_column_locations`,
`_cell_render_cache`, `_row_render_cache`, `_row_renderable_cache`, `_line_cache`, `_data`, `_update_count`,
`_pseudo_class_state`, `_show_hover_cursor`, `_header_row_key`, `_labelled_row_exists`, `_row_label_column_width`,
`_get_offsets`, `_get_row_style`, `_get_row_renderables` and `_get_styles_to_render_cell`, makes the cell cache's key
as `_render_cell` does and a column's width as `Column.get_render_width` does, and imports
`textual._segment_tools`, `textual._types` and `textual.widgets._data_table`. tests/tui/test_textual_fast_path.py
checks it draws what DataTable draws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._segment_tools import line_crop
from textual._types import SegmentLines
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets._data_table import CellCacheKey
from textual.widgets.data_table import ColumnKey, RowKey

from gpumon.tui._textual_compat.fast_path import plain_box, render_plain_box, text_cell_lines
from gpumon.tui._textual_compat.public import PlainCellTable, StyleFinish


def _discard(cache: Any, doomed: Callable[[Any], bool]) -> None:
    """Drop the entries of a Textual LRUCache whose key matches."""
    for key in [key for key in cache.keys() if doomed(key)]:  # noqa: SIM118 - Textual's LRUCache is not iterable
        cache.discard(key)


class FastCellTable(PlainCellTable):
    """PlainCellTable, drawn and updated through DataTable's internals."""

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> SegmentLines:
        """DataTable's cell rendering, with one-line body cells drawn by `text_cell_lines` instead of Rich's
        renderable pipeline (most of the table's cost when a row's figures change); the same cache, key and
        result (tests/tui/test_textual_fast_path.py compares them)."""
        if row_index < 0 or column_index < 0 or self.fixed_rows or self.fixed_columns:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        if row_key is None or column_key is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        cache_key: CellCacheKey = (
            row_key,
            column_key,
            base_style,
            cursor,
            hover,
            self._show_hover_cursor,
            self._update_count,
            self._pseudo_class_state,
        )
        lines: SegmentLines | None = self._cell_render_cache.get(cache_key)
        if lines is not None:
            return lines
        row = self.rows.get(row_key)
        datum = self._data.get(row_key, {}).get(column_key)
        cell: RenderableType = (  # a Text is its own renderable, an empty one is not (default_cell_formatter)
            datum if isinstance(datum, Text) and datum else self._get_row_renderables(row_index).cells[column_index]
        )
        if row is not None and row.height == 1 and isinstance(cell, Text):
            component_style, post_style = self._get_styles_to_render_cell(
                False,
                False,
                False,
                hover,
                cursor,
                self.show_cursor,
                self._show_hover_cursor,
                self.cursor_foreground_priority == "css",
                self.cursor_background_priority == "css",
            )
            pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
            lines = text_cell_lines(self.app.console, cell, width, self.cell_padding, pre_style, post_style)
        if lines is None:
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        self._cell_render_cache[cache_key] = lines
        return lines

    _frame_style: Style | None = None
    """The widget's rich_style while render_lines runs (DataTable.render_line reads it again for every line)."""
    _frame_columns: list[tuple[ColumnKey, int]] | None = None
    """The columns' keys and widths while render_lines runs, read at its first body line."""

    def render_lines(self, crop: Region) -> list[Strip]:
        """DataTable.render_lines; a table in a plain box (fast_path.plain_box: at most a top border, no scrollbar)
        is drawn as the panes are, without StylesCache: its content lines from render_line, each style finished."""
        self._frame_style = self.rich_style
        try:
            if not plain_box(self) or self.show_vertical_scrollbar or self.show_horizontal_scrollbar:
                return super().render_lines(crop)
            self._pseudo_class_state = self.get_pseudo_class_state()  # as DataTable.render_lines sets it
            return render_plain_box(self, crop, self.content_region.height, self._finished_line)
        finally:
            self._frame_style = self._frame_columns = None

    def _finished_line(self, y: int, finish: StyleFinish | None) -> Strip:
        strip = self.render_line(y)
        return strip if finish is None else finish.strip(strip)

    def render_line(self, y: int) -> Strip:
        """DataTable.render_line, with the widget's style read once per render_lines call."""
        base_style = self._frame_style
        if base_style is None or self.fixed_rows:
            return super().render_line(y)
        scroll_x, scroll_y = self.scroll_offset
        if y >= (self.get_row_height(self._header_row_key) if self.show_header else 0):
            y += scroll_y
        return self._render_line(y, scroll_x, scroll_x + self.size.width, base_style)

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """DataTable's line; a body row (one line, the row cursor, no fixed or labelled parts) is assembled here from
        its cells, skipping DataTable's per-row bookkeeping (the header's style, each cell's highlight test, its row
        and line caches, which every update empties); the same Strip (tests/tui/test_textual_fast_path.py)."""
        strip = self._body_line(y, x1, x2, base_style)
        return strip if strip is not None else super()._render_line(y, x1, x2, base_style)

    def _body_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip | None:
        """A body row's line as DataTable._render_line_in_row + _render_line draw it, or None for any other line."""
        if (
            self.fixed_rows
            or self.fixed_columns
            or self.cursor_type != "row"
            or (self._labelled_row_exists and self.show_row_labels)
        ):
            return None
        try:
            row_key, line_in_row = self._get_offsets(y)
        except LookupError:
            return None
        row_index = self._row_locations.get(row_key)
        row = self.rows.get(row_key)
        if row_key is self._header_row_key or line_in_row or row_index is None or row is None or row.height != 1:
            return None
        cursor = self.cursor_coordinate.row == row_index
        hover = self.hover_coordinate.row == row_index
        row_style = self._get_row_style(row_index, base_style)
        segments: list[Segment] = []
        table_width = self._row_label_column_width
        # The cell cache's key as _render_cell makes it, its per-line parts read once (they are reactives).
        cached = self._cell_render_cache.get
        same_for_the_line = (row_style, cursor, hover, self._show_hover_cursor, self._update_count)
        pseudo_classes = self._pseudo_class_state
        columns = self._frame_columns if self._frame_style is not None else None
        if columns is None:
            columns = self._column_widths()
            if columns is None:
                return None
            if self._frame_style is not None:
                self._frame_columns = columns
        for column_index, (column_key, width) in enumerate(columns):
            lines = cached((row_key, column_key, *same_for_the_line, pseudo_classes))
            if lines is None:
                lines = self._render_cell(row_index, column_index, row_style, width, cursor, hover)
            segments += lines[0]
            table_width += width
        extend_style, _ = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor, False, False
        )
        extend_style = (
            row_style + extend_style + Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        )
        widget_width = self.size.width
        segments.append(Segment(" " * max(0, widget_width - table_width), extend_style))
        if x1 == 0 and x2 >= widget_width >= table_width:  # nothing to crop: every cell is drawn its width wide
            return Strip(segments, widget_width).simplify()
        return Strip(line_crop(segments, x1, x2, widget_width)).adjust_cell_length(widget_width, base_style).simplify()

    def _column_widths(self) -> list[tuple[ColumnKey, int]] | None:
        """Each column's key and width in cells (Column.get_render_width), in order; None if one has no key."""
        padding = 2 * self.cell_padding
        columns = self.columns
        column_key_at = self._column_locations.get_key
        widths = []
        for column_index in range(len(columns)):
            column_key = column_key_at(column_index)
            if column_key is None:
                return None
            column = columns[column_key]
            widths.append((column_key, padding + (column.content_width if column.auto_width else column.width)))
        return widths

    def replace_cells(self, changed: dict[int, dict[str, Text]]) -> None:
        """Put new values in existing cells and repaint only their rows.

        DataTable.update_cell invalidates every cached cell, row and line and repaints the whole table, so one
        changed CPU% re-renders every cell; here only the changed cells' cache entries are dropped (DataTable's
        private caches).
        """
        if not changed:
            return
        changed_cells: set[tuple[RowKey, ColumnKey]] = set()
        row_keys: set[RowKey] = set()
        for pid, changes in changed.items():
            row_key = RowKey(str(pid))
            row_keys.add(row_key)
            for key, cell in changes.items():
                column_key = ColumnKey(key)
                self._data[row_key][column_key] = cell
                changed_cells.add((row_key, column_key))
        _discard(self._cell_render_cache, lambda key: (key[0], key[1]) in changed_cells)
        # Rows and lines are cheap to re-assemble from the cells, and only the refreshed rows are re-rendered
        # (the other lines come from the widget's own line cache), so these caches are simply emptied.
        self._row_render_cache.clear()
        self._row_renderable_cache.clear()
        self._line_cache.clear()
        self._refresh_rows(row_keys)

    def _refresh_rows(self, row_keys: set[RowKey]) -> None:
        """DataTable.refresh_row for each row, in one refresh: where every row is one line tall, a row's region is
        its index below the header (refresh_row sums the heights of the rows above it, and the column widths, for
        each row)."""
        rows = self.rows
        if any(row.height != 1 for row in rows.values()):
            for row_key in row_keys:
                index = self._row_locations.get(row_key)
                if index is not None:
                    self.refresh_row(index)
            return
        columns_width = sum(column.get_render_width(self) for column in self.columns.values())
        width = max(self.size.width, columns_width + self._row_label_column_width)
        top = self.header_height if self.show_header else 0
        window, offset = self.window_region, self.scroll_offset
        regions = []
        for row_key in row_keys:
            index = self._row_locations.get(row_key)
            if index is None:
                continue
            region = Region(0, top + index, width, 1)
            if window.overlaps(region):
                regions.append(region.translate(-offset))
        if regions:
            self.refresh(*regions)
