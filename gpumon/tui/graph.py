"""History graphs on a fixed 0-100% scale: braille (2x4 dots a cell, as btop draws them) or block characters, kept
between redraws and moved a column at a time; and the time axis beneath them, with event markers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise

from rich.text import Span, Text

from gpumon.sampling.history import PROCESS_ENDED, PROCESS_STARTED, THROTTLED, XID_ERROR, History
from gpumon.tui._textual_compat import drawn_text
from gpumon.tui.glyphs import pick


class GraphStyle(Enum):
    """How a graph's cells are drawn."""

    BRAILLE = "braille"
    """2 samples a cell, 4 levels a row: twice the history and half the steps of blocks in the same room."""
    BLOCKS = "blocks"
    """1 sample a cell, 8 levels a row: for fonts without braille."""
    ASCII = "ascii"
    """1 sample a cell, 4 levels a row ('_-=#'): for terminals without either (glyphs.ascii_only)."""

    @property
    def samples_per_cell(self) -> int:
        return 2 if self is GraphStyle.BRAILLE else 1

    @property
    def levels_per_row(self) -> int:
        return 8 if self is GraphStyle.BLOCKS else 4


MAX_ROWS = 24
"""The tallest graph drawn, in rows."""
NO_DATA = "·"
"""The bottom cell of a column before the history begins: the span still to fill reads as a dotted baseline."""
NO_DATA_ASCII = "."
NO_DATA_STYLE = "bright_black"
_BLOCKS = "▁▂▃▄▅▆▇█"
_ASCII_LEVELS = "_-=#"
# Braille dot bits filled from the bottom up: the left column's dots 7, 3, 2, 1 and the right column's 8, 6, 5, 4.
_LEFT_DOTS = (0, 0x40, 0x44, 0x46, 0x47)
_RIGHT_DOTS = (0, 0x80, 0xA0, 0xB0, 0xB8)


def height(value: float | None, rows: int, style: GraphStyle) -> int:
    """A sample's height in levels on the 0-100% scale: 0 for a missing sample, 1 (the bottom level) for 0% and
    every level of every row for 100%."""
    if value is None or value != value:
        return 0
    top = rows * style.levels_per_row - 1
    fraction = min(1.0, max(0.0, value / 100.0))
    return 1 + int(fraction * top + 0.5)


_COLUMNS: dict[tuple[GraphStyle, int, tuple[int, ...]], tuple[str, ...]] = {}
"""(style, rows, sample heights) -> the column's characters, top row first; emptied when it reaches _COLUMNS_MAX."""
_COLUMNS_MAX = 16384


def column(style: GraphStyle, rows: int, heights: tuple[int, ...]) -> tuple[str, ...]:
    """One cell column of a graph `rows` tall from the heights of its samples (one for blocks, two for braille)."""
    key = (style, rows, heights)
    cells = _COLUMNS.get(key)
    if cells is None:
        if len(_COLUMNS) >= _COLUMNS_MAX:
            _COLUMNS.clear()
        levels = style.levels_per_row
        chars: list[str] = []
        for row in range(rows - 1, -1, -1):
            fills = [min(levels, max(0, sample - levels * row)) for sample in heights]
            if style is GraphStyle.BRAILLE:
                left, right = [*fills, 0][:2]
                dots = _LEFT_DOTS[left] | _RIGHT_DOTS[right]
                chars.append(chr(0x2800 + dots) if dots else " ")
            else:
                levels_drawn = _BLOCKS if style is GraphStyle.BLOCKS else _ASCII_LEVELS
                chars.append(levels_drawn[fills[0] - 1] if fills[0] else " ")
        cells = _COLUMNS[key] = tuple(chars)
    return cells


def _no_data_column(rows: int, style: GraphStyle) -> tuple[str, ...]:
    return (" ",) * (rows - 1) + (NO_DATA_ASCII if style is GraphStyle.ASCII else NO_DATA,)


@dataclass(frozen=True, slots=True)
class Window:
    """Which samples a graph `width` cells wide shows: the cells up to the one holding the sample just before `end`
    (History.added minus the samples scrolled back), aligned so a cell always holds the same samples."""

    style: GraphStyle
    width: int
    end: int
    first_kept: int
    """The oldest sample the history still holds (absolute index); older cells show no data."""
    samples_per_dot: int = 1
    """Samples averaged into each dot column (braille) or cell (blocks): a coarser graph spans more time and moves
    less often."""

    @property
    def samples_per_cell(self) -> int:
        return self.style.samples_per_cell * self.samples_per_dot

    @property
    def last_cell(self) -> int:
        return (self.end - 1) // self.samples_per_cell

    @property
    def first_cell(self) -> int:
        return self.last_cell - self.width + 1

    @property
    def empty_cells(self) -> int:
        """Cells on the left with no sample at all (before the history began)."""
        return min(self.width, max(0, self.first_kept // self.samples_per_cell - self.first_cell))


class Graph:
    """One series drawn `rows` tall in a `Window`, kept between redraws.

    When the window moves on by a few samples, the cached rows are shifted by the cells that scrolled out and only the
    cells holding the new samples are drawn (the newest braille cell is redrawn when its second sample arrives).
    """

    def __init__(self, style: GraphStyle, rows: int) -> None:
        self.style = style
        self.rows = max(1, min(MAX_ROWS, rows))
        self._window: Window | None = None
        self._lines: list[str] = []

    def lines(self, history: History, key: str, window: Window) -> list[str]:
        """The graph's rows, top first, each window.width cells."""
        previous = self._window
        spc = window.samples_per_cell
        if (
            previous is not None
            and previous.width == window.width
            and previous.style is window.style
            and previous.samples_per_dot == window.samples_per_dot
            and window.end >= previous.end
            and window.last_cell - previous.last_cell < window.width
        ):
            if window.end == previous.end:
                return self._lines
            shift = window.last_cell - previous.last_cell
            start = previous.last_cell * spc
            new = self._columns(history, key, window, start)
            self._lines = [
                line[shift : window.width - 1] + "".join(cells)
                for line, cells in zip(self._lines, zip(*new, strict=True), strict=True)
            ]
        else:
            columns = self._columns(history, key, window, window.first_cell * spc)
            self._lines = ["".join(cells) for cells in zip(*columns, strict=True)]
        self._window = window
        return self._lines

    def _columns(self, history: History, key: str, window: Window, start: int) -> list[tuple[str, ...]]:
        """The columns of the cells from the one holding sample `start` to the window's last."""
        spc, rows, style, per_dot = window.samples_per_cell, self.rows, self.style, window.samples_per_dot
        values = history.between(key, start, window.end)
        if per_dot > 1:
            values = [_mean(values[offset : offset + per_dot]) for offset in range(0, len(values), per_dot)]
        heights = [height(value, rows, style) for value in values]
        dots = style.samples_per_cell
        heights += [0] * (-len(heights) % dots)
        columns: list[tuple[str, ...]] = []
        for index, offset in enumerate(range(0, len(heights), dots)):
            if start + (index + 1) * spc <= window.first_kept:
                columns.append(_no_data_column(rows, style))
            else:
                columns.append(column(style, rows, tuple(heights[offset : offset + dots])))
        return columns


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the samples present (None where none is)."""
    present = [value for value in values if value is not None and value == value]
    return sum(present) / len(present) if present else None


def graph_spans(line: str, offset: int, empty_cells: int, style: str) -> list[Span]:
    """The spans of a graph row placed at `offset`: the cells before the history dim, the rest in `style`."""
    spans = [Span(offset, offset + empty_cells, NO_DATA_STYLE)] if empty_cells else []
    if style and empty_cells < len(line):
        spans.append(Span(offset + empty_cells, offset + len(line), style))
    return spans


WHOLE_CELLS_UP_TO_S = 1.0
"""Sampling this often or faster, a braille graph moves on a whole cell at a time: a cell is drawn once both its
samples are in, at most one sample (a second at most) behind the figure beside the graph, instead of being redrawn
half full and then full. Every graph row changes half as often: on the H200 at 1 s the dashboard went from 0.86% to
0.82% of a core and from 7.3 to 6.5 KiB/s to the terminal (benchmarks/README.md). Slower sampling keeps half cells,
so the graph never trails by more than a second."""


def window_for(
    history: History,
    style: GraphStyle,
    width: int,
    skip: int = 0,
    whole_cells: bool = False,
    samples_per_dot: int = 1,
) -> Window:
    """The window of a graph `width` cells wide whose newest sample is `skip` samples before the newest recorded;
    `whole_cells`: ending at the last cell whose samples are all in (see WHOLE_CELLS_UP_TO_S); `samples_per_dot`:
    that many samples averaged into each dot column (see Window)."""
    added = history.added
    end = max(0, added - skip)
    if whole_cells:
        end -= end % (style.samples_per_cell * samples_per_dot)
    return Window(style, width, end, max(0, added - len(history)), samples_per_dot)


def seconds_per_sample(history: History, count: int = 64, skip: int = 0) -> float | None:
    """The usual spacing of recent samples (the median gap), or None before there are two."""
    added = history.added
    last = _SPACING[0]
    if last is not None and last[0] is history and last[1] == (added, count, skip):
        return last[2]
    stamps = [stamp for stamp in history.timestamps(count, skip) if stamp is not None]
    gaps = sorted(later - earlier for earlier, later in pairwise(stamps) if later > earlier)
    spacing = gaps[len(gaps) // 2] if gaps else None
    if history.added == added:  # not a sample added meanwhile (a source's thread), or `added` would not say it
        _SPACING[0] = (history, (added, count, skip), spacing)
    return spacing


_SPACING: list[tuple[History, tuple[int, int, int], float | None] | None] = [None]
"""The last seconds_per_sample: (the history, its `added` then and the count and skip asked, the spacing); the axes
and the title of one redraw ask for it several times."""


def age(seconds: float) -> str:
    """A compact time span for an axis label: '45s', '2.5s', '4m30s', '1h05m'."""
    if seconds < 9.95:
        return f"{seconds:.1f}s".replace(".0s", "s")
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(whole // 60, 60)
    return f"{hours}h{rest:02d}m"


EVENT_MARKS = (
    (XID_ERROR, "X", "bold white on red"),
    (THROTTLED, "!", "bold red"),
    (PROCESS_ENDED, "▾", "bold yellow"),
    (PROCESS_STARTED, "▴", "bold green"),
)
"""Event bit, its mark on the time axis and the mark's style, the first that applies winning."""
ASCII_MARKS = {"▾": "v", "▴": "^"}


def event_marks(events: Sequence[float | None], spc: int) -> list[tuple[str, str] | None]:
    """Per cell of `spc` samples, the mark of the events of its samples (None where none happened)."""
    marks: list[tuple[str, str] | None] = [None] * -(-len(events) // spc)
    bits: dict[int, int] = {}
    for index, value in enumerate(events):
        if value and value == value:  # a sample with events (not None, 0 or NaN): few in a window
            bits[index // spc] = bits.get(index // spc, 0) | int(value)
    for cell, cell_bits in bits.items():
        marks[cell] = next(((mark, mark_style) for bit, mark, mark_style in EVENT_MARKS if cell_bits & bit), None)
    return marks


def time_axis(
    width: int, seconds_per_cell: float | None, skipped_seconds: float, marks: Sequence[tuple[str, str] | None] = ()
) -> Text:
    """The axis under graphs `width` cells wide: '-1m20s──────-1m──────-40s──────-20s──now': the ages of the left
    edges of the first cell and of the quarter points, and 'now' at the right end (an age there when scrolled back);
    the event `marks` (one per cell, right-aligned) drawn on it. A label never covers a mark, nor a mark a label: a
    label moves aside to the nearest free cells (up to its own length), or is left out."""
    cells = [pick("─", "-")] * width
    offset = width - len(marks)
    marked = [False] * width
    spans: list[Span] = []
    for index, mark in enumerate(marks):
        cell = offset + index
        if mark is not None and 0 <= cell < width:
            cells[cell] = pick(mark[0], ASCII_MARKS.get(mark[0], mark[0]))
            marked[cell] = True
            spans.append(Span(cell, cell + 1, mark[1]))
    if seconds_per_cell is not None and width >= 12:
        free_from = 0
        for point in (0, width // 4, width // 2, 3 * width // 4, width - 1):
            seconds = (width - point if point < width - 1 else 0) * seconds_per_cell + skipped_seconds
            label = "now" if seconds <= 0 else "-" + age(seconds)
            wanted = 0 if point == 0 else width - len(label) if point == width - 1 else point - len(label) // 2
            for shift in _shifts(len(label)):
                begin = wanted + shift
                if begin >= free_from and begin + len(label) <= width and not any(marked[begin : begin + len(label)]):
                    cells[begin : begin + len(label)] = label
                    free_from = begin + len(label) + 1
                    break
    return drawn_text("".join(cells), spans, style="bright_black")


def _shifts(most: int) -> list[int]:
    """0, -1, 1, -2, 2, ... up to `most` cells either way: where a label tries to go, nearest first."""
    return [0, *(sign * step for step in range(1, most + 1) for sign in (-1, 1))]


def axis_span(width: int, seconds_per_cell: float | None) -> str:
    """How much time a graph `width` cells wide spans, e.g. '1m20s' (for a title when there is no axis line)."""
    if seconds_per_cell is None:
        return "…"
    return age(width * seconds_per_cell)


def y_marks(rows: int) -> list[str]:
    """The y-axis beside a graph `rows` tall, 4 cells a row: '100┤' at the top, '  0┤' at the bottom."""
    tick, line = pick("┤", "+"), pick("│", "|")
    if rows == 1:
        return ["   " + tick]
    return ["100" + tick, *(["   " + line] * (rows - 2)), "  0" + tick]
