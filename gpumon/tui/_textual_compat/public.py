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

    def strip(self, strip: Strip) -> Strip:
        """`strip` with every segment's style finished (a line built without the finish)."""
        return Strip([Segment(text, self(style), control) for text, style, control in strip], strip.cell_length)


def style_finish(filters: Sequence[LineFilter], background: Color) -> StyleFinish | None:
    """The filters as a StyleFinish where they are exactly Textual's default one; None otherwise (NO_COLOR,
    TEXTUAL_FILTERS=dim, native ANSI colours), where lines are built unfiltered and filtered as Textual does."""
    if len(filters) == 1 and type(filters[0]) is ANSIToTruecolor:
        last = _LAST_FINISH[0]
        if last is not None and last[0] is filters[0] and last[1] == background:
            return last[2]
        finish = StyleFinish(filters[0], background.rich_color)
        _LAST_FINISH[0] = (filters[0], background, finish)
        return finish
    return None


_LAST_FINISH: list[tuple[LineFilter, Color, StyleFinish] | None] = [None]
"""The last StyleFinish made, handed back while the filter and background are the same: the same object, which the
panes' caches then compare by identity, frame after frame."""


class SegmentBuilder:
    """Builds `Strip(line.render(console)).adjust_cell_length(width).apply_style(base)`'s segments in one pass, each
    style passed through `finish` where one is given.

    The same span walk as Rich's Text.render, with the combined styles cached across redraws (a pane uses a few
    dozen). Like Text.render, a line without spans is drawn without its own style.
    """

    def __init__(self) -> None:
        self._combined_styles: dict[tuple[Style, StyleFinish | None], dict[tuple[StyleType, ...], Style | None]] = {}
        """Per base style and finish, the style of the segments under each combination of span styles."""
        self._last: tuple[Style, StyleFinish | None, dict[tuple[StyleType, ...], Style | None]] | None = None

    def segments(
        self, console: Console, line: Text, width: int, base: Style, finish: StyleFinish | None = None
    ) -> list[Segment]:
        plain = line.plain
        spans = line.spans
        styles = self._styles(base, finish)
        plain_style = styles.get((), _UNSET)
        if plain_style is _UNSET:
            plain_style = self._style(console, base, finish, ())
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
                    key = tuple(values[active] for active in sorted(stack))
                    style = styles.get(key, _UNSET)
                    if style is _UNSET:
                        style = self._style(console, base, finish, key)
                    segments.append(Segment(plain[offset:next_offset], style))
        cells = line.cell_len
        if cells < width:
            segments.append(Segment(" " * (width - cells), plain_style))
        return segments

    def _styles(self, base: Style, finish: StyleFinish | None) -> dict[tuple[StyleType, ...], Style | None]:
        """The combined styles kept for a base style and finish (those of the last call, found by identity)."""
        last = self._last
        if last is not None and last[0] is base and last[1] is finish:
            return last[2]
        styles = self._combined_styles.setdefault((base, finish), {})
        self._last = (base, finish, styles)
        return styles

    def _style(
        self, console: Console, base: Style, finish: StyleFinish | None, values: tuple[StyleType, ...]
    ) -> Style | None:
        """The style of the segments under the span styles `values` over `base`, `finish`ed, cached; no span styles:
        the base."""
        styles = self._styles(base, finish)
        style = styles.get(values, _UNSET)
        if style is _UNSET:
            combined = _combine(console, values) if values else None
            style = (base + combined) if base else combined
            if finish is not None:
                style = finish(style)
            styles[values] = style
        return style

    def _disjoint(self, console: Console, line: Text, base: Style, finish: StyleFinish | None) -> list[Segment] | None:
        """`segments` for spans in order that neither overlap nor are empty (a graph row, most lines), without the
        edge sort; None for any other spans."""
        plain = line.plain
        line_style = line.style
        styles = self._styles(base, finish)
        segments: list[Segment] = []
        append = segments.append
        position = 0
        for span in line.spans:
            start, end = span.start, span.end
            if not position <= start < end <= len(plain):
                return None
            if start > position:
                style = styles.get((line_style,), _UNSET)
                if style is _UNSET:
                    style = self._style(console, base, finish, (line_style,))
                append(Segment(plain[position:start], style))
            values = (line_style, span.style)
            style = styles.get(values, _UNSET)
            if style is _UNSET:
                style = self._style(console, base, finish, values)
            append(Segment(plain[start:end], style))
            position = end
        if position < len(plain):
            style = styles.get((line_style,), _UNSET)
            if style is _UNSET:
                style = self._style(console, base, finish, (line_style,))
            append(Segment(plain[position:], style))
        return segments


_UNSET = Style()
"""Marks a combination not in the cache yet (a cached one may be None)."""


def _combine(console: Console, values: tuple[StyleType, ...]) -> Style:
    return Style.combine(console.get_style(value, default=Style.null()) for value in values)
