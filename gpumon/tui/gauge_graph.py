"""Gauges drawn as labelled history graphs ('Util    44% 100┤⣿⣿…', its bar and details under the label) and the row
budget between them: shared by the GPU pane and the CPU pane's host graphs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from rich.text import Span, Text

from gpumon import units
from gpumon.sampling.history import History
from gpumon.tui._textual_compat import drawn_text
from gpumon.tui.bar import bar_cell_spans, bar_string
from gpumon.tui.glyphs import forget_on_change, pick
from gpumon.tui.graph import (
    MAX_ROWS,
    Graph,
    GraphStyle,
    Window,
    event_marks,
    graph_spans,
    seconds_per_sample,
    time_axis,
    window_for,
    y_marks,
)

LABEL_WIDTH = 7
PERCENT_WIDTH = 4
LABEL_COLUMN = LABEL_WIDTH + PERCENT_WIDTH + 1
"""'Util    44% ': the gauge's label and value left of its graph (its bar on the next row)."""
Y_AXIS_WIDTH = 4
GRAPH_OFFSET = LABEL_COLUMN + Y_AXIS_WIDTH
"""Where a graph's first cell is in a full-density line."""
MAX_PRIMARY_ROWS = 12
"""The tallest primary graphs (GPU utilization and memory, host CPU)..."""
MAX_SECONDARY_ROWS = 6
"""... and the others (SM and tensor activity, host memory), in rows."""
USUAL_CAPS = (MAX_PRIMARY_ROWS, MAX_SECONDARY_ROWS)
GROWN_CAPS = (MAX_ROWS, MAX_ROWS)
"""Where the room would otherwise stay blank, every graph may grow to the tallest drawn."""


@dataclass(frozen=True, slots=True)
class Gauge:
    """One percentage (of a GPU, or of the host): its label, value, history key and colour; `details` are related
    figures shown under its label where its graph is tall enough."""

    label: str
    short_label: str
    value: float | None
    history_key: str
    style: str
    primary: bool = True
    details: tuple[tuple[str, float | None], ...] = ()


GraphCache = dict[tuple[str, int, GraphStyle], Graph]
"""(history key, rows, style) -> the Graph kept between redraws."""


@dataclass(frozen=True, slots=True)
class GraphView:
    """What every graph of the pane shows: the style, how far back it is scrolled, and the graphs kept."""

    history: History
    style: GraphStyle = GraphStyle.BRAILLE
    skip: int = 0
    """Samples scrolled back from the newest."""
    cache: GraphCache | None = None
    whole_cells: bool = False
    """Graphs move on a whole cell at a time (graph.WHOLE_CELLS_UP_TO_S)."""
    samples_per_dot: int = 1
    """Samples averaged into each dot column (graph.Window)."""

    def graph_lines(self, key: str, rows: int, width: int) -> tuple[list[str], int]:
        """A graph's rows, top first, and how many cells on its left have no history yet."""
        window = self.window(width)
        cache = self.cache if self.cache is not None else {}
        graph = cache.get((key, rows, self.style))
        if graph is None:
            if len(cache) >= _GRAPH_CACHE_MAX:
                cache.clear()
            graph = cache[(key, rows, self.style)] = Graph(self.style, rows)
        return graph.lines(self.history, key, window), window.empty_cells

    def window(self, width: int) -> Window:
        return window_for(self.history, self.style, width, self.skip, self.whole_cells, self.samples_per_dot)


_GRAPH_CACHE_MAX = 128


def detail_text(label: str, value: float | None) -> str:
    return label.ljust(LABEL_WIDTH) + units.percent(value).rjust(PERCENT_WIDTH)


def gauge_graph_lines(gauge: Gauge, view: GraphView, width: int, rows: int) -> list[Text]:
    """'Util    44% 100┤⣿⣿⣿…': the label and value, then the gauge's bar and details under it, beside its y-axis and
    its graph `rows` tall filling the width."""
    graph_width = max(1, width - GRAPH_OFFSET)
    graph, empty = view.graph_lines(gauge.history_key, rows, graph_width)
    marks = y_marks(rows)
    lines: list[Text] = []
    for row, (cells, mark) in enumerate(zip(graph, marks, strict=True)):
        kind = min(row, 2) if row - 2 < len(gauge.details) else 3
        if kind == 0:
            label = f"{gauge.label.ljust(LABEL_WIDTH)}{units.percent(gauge.value).rjust(PERCENT_WIDTH)} "
        elif kind == 1:
            label = bar_string(gauge.value, LABEL_COLUMN - 1) + " "
        elif kind == 2:
            label = detail_text(*gauge.details[row - 2]) + " "
        else:
            label = " " * LABEL_COLUMN
        key = (kind, label, mark, cells, empty, gauge.style)
        line = _ROW_TEXTS.get(key)
        if line is None:
            if len(_ROW_TEXTS) >= _ROW_TEXTS_MAX:
                _ROW_TEXTS.clear()
            line = _ROW_TEXTS[key] = _gauge_row(kind, label, mark, cells, empty, gauge.style)
        lines.append(line)
    return lines


_ROW_TEXTS: dict[tuple[int, str, str, str, int, str], Text] = {}
"""Graph rows drawn, by what they show: a row that reads as it did (a flat graph moved on, a label whose figure held)
is handed back as the same Text, which the pane then sees as unchanged at once. Never changed after it is made."""
_ROW_TEXTS_MAX = 1024
forget_on_change(_ROW_TEXTS.clear)


def _gauge_row(kind: int, label: str, mark: str, cells: str, empty: int, style: str) -> Text:
    """One row of gauge_graph_lines: `kind` 0 the label and value, 1 the bar, 2 a detail, 3 blank left of the axis."""
    spans: list[Span] = []
    if kind == 0:
        spans.append(Span(LABEL_WIDTH, LABEL_COLUMN - 1, style))
    elif kind == 1:
        spans = bar_cell_spans(label[:-1], style, 0)
    elif kind == 2:
        spans.append(Span(0, LABEL_COLUMN, "bright_black"))
    spans.append(Span(LABEL_COLUMN, GRAPH_OFFSET, "bright_black"))
    spans.extend(graph_spans(cells, GRAPH_OFFSET, empty, style))
    return drawn_text(label + mark + cells, spans)


READABLE_ROWS = 4
"""Utilization and memory graphs grow to this many rows before the others grow beyond two."""


def allot_rows(available: int, gauges_: list[Gauge], caps: tuple[int, int] = USUAL_CAPS) -> list[int] | None:
    """Graph rows per gauge within `available` lines: one each; then utilization and memory up to READABLE_ROWS; then
    the others up to two; from there the primary gauges growing twice as fast as the others, up to their `caps`
    (primary, others). None where even one row each does not fit."""
    rows = _allotted(available, tuple(gauge.primary for gauge in gauges_), caps)
    return list(rows) if rows is not None else None


@lru_cache(maxsize=256)
def _allotted(available: int, primary: tuple[bool, ...], caps: tuple[int, int]) -> tuple[int, ...] | None:
    """allot_rows from which gauges are primary: the same on every redraw, so kept."""
    if available < len(primary):
        return None
    rows = [1] * len(primary)
    spare = available - len(primary)
    stages = [(READABLE_ROWS, 1), (READABLE_ROWS, 2), caps]
    weights = [2 if is_primary else 1 for is_primary in primary]
    for primary_cap, secondary_cap in stages:
        limits = [primary_cap if is_primary else secondary_cap for is_primary in primary]
        while spare:
            growable = [index for index in range(len(rows)) if rows[index] < limits[index]]
            if not growable:
                break
            grow = min(growable, key=lambda index: (rows[index] / weights[index], index))
            rows[grow] += 1
            spare -= 1
    return tuple(rows)


def time_axis_line(view: GraphView, width: int, events_key: str | None = None) -> Text:
    """The time axis under graphs laid out as gauge_graph_lines draws them in a line `width` cells wide, with the
    events of the history's `events_key` series marked (processes starting and ending, throttling, XID errors)."""
    graph_width = max(1, width - GRAPH_OFFSET)
    window = view.window(graph_width)
    spc = window.samples_per_cell
    events: Sequence[float | None] = (
        view.history.between(events_key, window.first_cell * spc, window.end) if events_key is not None else ()
    )
    per_sample = seconds_per_sample(view.history, skip=view.skip)
    seconds_per_cell = per_sample * spc if per_sample is not None else None
    skipped = view.skip * per_sample if per_sample is not None else 0.0
    marks = event_marks(events, spc)
    key = (width, graph_width, seconds_per_cell, skipped, tuple(marks))
    line = _AXIS_LINES.get(key)
    if line is None:
        if len(_AXIS_LINES) >= _AXIS_LINES_MAX:
            _AXIS_LINES.clear()
        axis = time_axis(graph_width, seconds_per_cell, skipped, marks)
        prefix = Text(" " * LABEL_COLUMN + "   " + pick("└", "+"), style="bright_black", no_wrap=True, end="")
        line = _AXIS_LINES[key] = Text.assemble(prefix, axis, no_wrap=True, end="")
    return line


_AXIS_LINES: dict[tuple[int, int, float | None, float, tuple[tuple[str, str] | None, ...]], Text] = {}
"""Time axis lines drawn, by what they show: an axis that reads as before (its window has not moved a cell, or moved
without a mark or label changing) is handed back as the same Text, as _ROW_TEXTS does. Never changed after it is
made."""
_AXIS_LINES_MAX = 64
forget_on_change(_AXIS_LINES.clear)
