"""What gpumon needs from Textual through its public API only: the fallbacks used on Textual versions the private
workarounds were not checked on (slower, same result)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import itemgetter

from rich.color import Color as RichColor
from rich.console import Console
from rich.segment import Segment
from rich.style import Style, StyleType
from rich.text import Span, Text
from textual.color import Color
from textual.driver import Driver
from textual.filter import ANSIToTruecolor, LineFilter
from textual.message_pump import MessagePump
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable


class PlainCellTable(DataTable[Text]):
    """A DataTable of Text cells keyed by str(pid) and column key, updated by `replace_cells`."""

    def replace_cells(self, changed: dict[int, dict[str, Text]]) -> None:
        """Put new values in existing cells: per pid, per column key (DataTable.update_cell, which repaints all)."""
        for pid, changes in changed.items():
            for key, cell in changes.items():
                self.update_cell(str(pid), key, cell)


def driver_class(default: type[Driver]) -> type[Driver]:
    return default


def update_timer(owner: MessagePump, interval: float, callback: Callable[[], None], name: str) -> Timer:
    """A paused repeating timer for `owner`'s repaints, as Textual makes its own."""
    return owner.set_interval(interval, callback, name=name, pause=True)


def send_changed_cells_only(screen: object) -> None:
    """Nothing: Textual sends a changed line from its widget's left edge."""


def lean_strip(segments: list[Segment], cell_length: int | None = None) -> Strip:
    """Textual's own Strip."""
    return Strip(segments, cell_length)


def plain_box(widget: Widget) -> bool:
    """Never: the panes draw through Textual's own render_lines."""
    return False


def cached_lines(widget: Widget, crop: object) -> None:
    """Never: Textual draws every line itself."""
    return None


def drawn_text(plain: str, spans: list[Span] | None = None, style: str = "") -> Text:
    """A one-line Text of characters gpumon draws (no control codes)."""
    return Text(plain, style=style, no_wrap=True, end="", spans=spans)


@dataclass(frozen=True, slots=True)
class StyleFinish:
    """What Textual's default line filter (`ANSIToTruecolor`: ANSI colours to the theme's truecolor, dim folded in)
    does to each segment's style, as a function of one style.

    Lines built with it need no filter pass: the pass would make a new Strip and new Segments for every line that
    changed, every frame, and leave the styles as they are (the filter is idempotent)."""

    truecolor: ANSIToTruecolor
    background: RichColor

    def __call__(self, style: Style | None) -> Style | None:
        return None if style is None else self.truecolor.truecolor_style(style, self.background)


def style_finish(filters: Sequence[LineFilter], background: Color) -> StyleFinish | None:
    """The filters as a StyleFinish where they are exactly Textual's default one; None otherwise (NO_COLOR,
    TEXTUAL_FILTERS=dim, native ANSI colours), where lines are built unfiltered and filtered as Textual does."""
    if len(filters) == 1 and type(filters[0]) is ANSIToTruecolor:
        return StyleFinish(filters[0], background.rich_color)
    return None


class SegmentBuilder:
    """Builds `Strip(line.render(console)).adjust_cell_length(width).apply_style(base)`'s segments in one pass, each
    style passed through `finish` where one is given.

    The same span walk as Rich's Text.render, with the combined styles cached across redraws (a pane uses a few
    dozen). Like Text.render, a line without spans is drawn without its own style.
    """

    def __init__(self) -> None:
        self._combined_styles: dict[tuple[Style, StyleFinish | None, tuple[StyleType, ...]], Style | None] = {}

    def segments(
        self, console: Console, line: Text, width: int, base: Style, finish: StyleFinish | None = None
    ) -> list[Segment]:
        plain = line.plain
        spans = line.spans
        styles = self._combined_styles
        plain_style = self._style(console, (base, finish, ()))
        segments = [Segment(plain, plain_style)] if not spans else self._disjoint(console, line, base, finish)
        if segments is None:
            values: list[StyleType] = [line.style, *(span.style for span in spans)]
            edges = [
                (0, False, 0),
                *((span.start, False, index) for index, span in enumerate(spans, 1)),
                *((span.end, True, index) for index, span in enumerate(spans, 1)),
                (len(plain), True, 0),
            ]
            edges.sort(key=itemgetter(0, 1))
            stack: list[int] = []
            segments = []
            for (offset, leaving, index), (next_offset, _, _) in pairwise(edges):
                if leaving:
                    stack.remove(index)
                else:
                    stack.append(index)
                if next_offset > offset:
                    key = (base, finish, tuple(values[active] for active in sorted(stack)))
                    style = styles.get(key, _UNSET)
                    if style is _UNSET:
                        style = self._style(console, key)
                    segments.append(Segment(plain[offset:next_offset], style))
        cells = line.cell_len
        if cells < width:
            segments.append(Segment(" " * (width - cells), plain_style))
        return segments

    def _style(self, console: Console, key: tuple[Style, StyleFinish | None, tuple[StyleType, ...]]) -> Style | None:
        """The style of the segments under `key`'s (base, finish, span styles), cached; no span styles: the base."""
        style = self._combined_styles.get(key, _UNSET)
        if style is _UNSET:
            base, finish, values = key
            combined = _combine(console, values) if values else None
            style = (base + combined) if base else combined
            if finish is not None:
                style = finish(style)
            self._combined_styles[key] = style
        return style

    def _disjoint(self, console: Console, line: Text, base: Style, finish: StyleFinish | None) -> list[Segment] | None:
        """`segments` for spans in order that neither overlap nor are empty (a graph row, most lines), without the
        edge sort; None for any other spans."""
        plain = line.plain
        styles = self._combined_styles
        pieces: list[tuple[int, int, tuple[StyleType, ...]]] = []
        position = 0
        for span in line.spans:
            start, end = span.start, span.end
            if not position <= start < end <= len(plain):
                return None
            if start > position:
                pieces.append((position, start, (line.style,)))
            pieces.append((start, end, (line.style, span.style)))
            position = end
        if position < len(plain):
            pieces.append((position, len(plain), (line.style,)))
        segments: list[Segment] = []
        for begin, stop, values in pieces:
            key = (base, finish, values)
            style = styles.get(key, _UNSET)
            if style is _UNSET:
                style = self._style(console, key)
            segments.append(Segment(plain[begin:stop], style))
        return segments


_UNSET = Style()
"""Marks a combination not in the cache yet (a cached one may be None)."""


def _combine(console: Console, values: tuple[StyleType, ...]) -> Style:
    return Style.combine(console.get_style(value, default=Style.null()) for value in values)
