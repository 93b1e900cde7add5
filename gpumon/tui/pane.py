"""Base classes of the dashboard panes and the title bar: Line API widgets whose lines are built for whatever width
they get."""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import repeat
from operator import ne, or_

from rich.cells import cell_len
from rich.errors import StyleSyntaxError
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region, Size
from textual.markup import escape
from textual.strip import Strip
from textual.widget import Widget

from gpumon.printable import printable
from gpumon.tui._textual_compat import SegmentBuilder, StyleFinish, lean_strip, plain_box, render_plain_box
from gpumon.tui.printable_text import printable_text

LineBuilder = Callable[[int], list[Text]]
"""Builds a pane's lines for a content width in cells."""


class LinesWidget(Widget):
    """A widget redrawn with `show_lines`; it asks for a layout pass only when its number of lines changes.

    Lines are turned into Strips directly (Textual's Line API) rather than through a Rich renderable, which
    costs several times less CPU per redraw, and plain boxes skip Textual's StylesCache (gpumon.tui._textual_compat).
    A resize rebuilds them at the new width, so graphs follow it.
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._build: LineBuilder | None = None
        self._lines: tuple[int, list[Text]] | None = None
        self._strips: tuple[int, Style, StyleFinish | None, list[Strip | None]] | None = None
        """(width, base style, style finish, one Strip per line or None where it must be built): kept for unchanged
        lines."""
        self._line_count = -1
        self._segments = SegmentBuilder()

    def show_lines(self, build: LineBuilder) -> None:
        """Redraw from a new builder: a layout pass if the line count changed, else only the lines that changed."""
        width = self.size.width
        previous = self._lines[1] if self._lines is not None and self._lines[0] == width else None
        strips = self._strips
        self._build = build
        self._lines = None
        self._strips = None
        line_count = len(self.lines(width)) if width > 0 else -1
        if line_count != self._line_count or line_count < 0 or previous is None:
            self.refresh(layout=line_count != self._line_count or line_count < 0)
        else:
            pairs = zip(previous, self.lines(width), strict=False)
            changed = [(y, old, new) for y, (old, new) in enumerate(pairs) if not _same(old, new)]
            if strips is not None and strips[0] == width and len(strips[3]) == line_count:
                kept = list(strips[3])
                for y, _, _ in changed:
                    kept[y] = None
                self._strips = (width, strips[1], strips[2], kept)
            regions = [region for y, old, new in changed for region in _changed_regions(y, old, new, width)]
            if regions:
                self.refresh(*regions)
        self._line_count = line_count

    def lines(self, width: int) -> list[Text]:
        """The pane's lines at a width, made printable and cut to fit it (built once per width and update)."""
        if self._build is None:
            return []
        if self._lines is None or self._lines[0] != width:
            lines = [printable_text(line) for line in self._build(width)]
            for line in lines:
                line.truncate(width, overflow="ellipsis")
            self._lines = (width, lines)
        return self._lines[1]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines(width))

    def render_line(self, y: int) -> Strip:
        return self._strip(y, self.size.width, None)

    def _strip(self, y: int, width: int, finish: StyleFinish | None) -> Strip:
        """Line `y` at `width` cells, its styles passed through `finish` (a widget's size is worth reading once per
        frame, not once per line)."""
        lines = self.lines(width)
        base = self.visual_style.rich_style
        if (
            self._strips is None
            or self._strips[0] != width
            or self._strips[1] != base
            or self._strips[2] != finish
            or len(self._strips[3]) != len(lines)
        ):
            self._strips = (width, base, finish, [None] * len(lines))
        strips = self._strips[3]
        if y >= len(strips):
            return Strip.blank(width, base)
        strip = strips[y]
        if strip is None:
            line = lines[y]
            if line.cell_len <= width:
                strip = lean_strip(self._segments.segments(self.app.console, line, width, base, finish), width)
            else:
                strip = Strip(line.render(self.app.console, end=""), line.cell_len)
                strip = strip.adjust_cell_length(width).apply_style(base)
                if finish is not None:
                    strip = Strip([Segment(text, finish(style), control) for text, style, control in strip], width)
            strips[y] = strip
        return strip

    def plain_box(self) -> bool:
        """Whether the fast path can draw this widget (see gpumon.tui._textual_compat)."""
        return plain_box(self)

    def render_lines(self, crop: Region) -> list[Strip]:
        """As Textual's StylesCache renders them; a plain box's cached Strips are handed over as they are."""
        if not plain_box(self):
            return super().render_lines(crop)
        width = self.size.width
        return render_plain_box(self, crop, len(self.lines(width)), lambda y, finish: self._strip(y, width, finish))


class Pane(LinesWidget):
    """A dashboard pane (the app's stylesheet gives every Pane its top border and title)."""

    DEFAULT_CSS = """
    Pane {
        height: auto;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._title_shown: str | None = None

    def set_title(self, title: str) -> None:
        """Show `title` in the top border as it reads: made printable, and never taken for Textual markup."""
        if title != self._title_shown:
            self._title_shown = title
            self.border_title = escape(printable(title))


def _changed_regions(y: int, old: Text, new: Text, width: int) -> list[Region]:
    """The cells of line `y` that look different between two drawings of it, as runs: only these are sent to the
    terminal (a graph moving on by half a braille cell changes one cell a row; a colour change over blank cells
    changes none). Two runs closer than a cursor move's bytes are sent as one. The whole line where base styles or
    widths differ."""
    before, after = old.plain, new.plain
    if (
        old.style != new.style
        or len(before) != len(after)
        or cell_len(before) != len(before)
        or cell_len(after) != len(after)
    ):
        return [Region(0, y, width, 1)]
    changed = bytearray(len(after))
    if before != after:
        start = _common_prefix(before, after)
        end = len(after) - _common_prefix(before[start:][::-1], after[start:][::-1])
        changed[start:end] = bytes(map(ne, before[start:end], after[start:end]))
    if old.spans != new.spans:
        old_spans, new_spans = set(old.spans), set(new.spans)
        for span in old_spans ^ new_spans:
            text = after if span in new_spans else before
            first, last = span.start, min(span.end, len(after))
            if _shows_nothing_on_blanks(span):
                changed[first:last] = bytes(map(or_, changed[first:last], map(ne, text[first:last], repeat(" "))))
            elif first < last:
                changed[first:last] = b"\x01" * (last - first)
    regions: list[Region] = []
    run_start = run_end = -1
    for run in _CHANGED_RUN.finditer(changed):
        if run_end >= 0 and len(after[run_end : run.start()].encode()) > _CURSOR_MOVE_BYTES:
            regions.append(Region(run_start, y, run_end - run_start, 1))
            run_start = -1
        if run_start < 0:
            run_start = run.start()
        run_end = run.end()
    if run_end >= 0:
        regions.append(Region(run_start, y, run_end - run_start, 1))
    return regions


_CHANGED_RUN = re.compile(b"[^\x00]+")
_CURSOR_MOVE_BYTES = 8
"""About what moving the cursor past unchanged cells costs (ESC [ row ; column H)."""


def _shows_nothing_on_blanks(span: Span) -> bool:
    """Whether a span's style is invisible on blank cells: nothing a blank shows (a background, reverse, a line
    through or under it, a link)."""
    try:
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
    except StyleSyntaxError:
        return False
    return not (
        style.bgcolor is not None
        or style.reverse
        or style.underline
        or style.underline2
        or style.strike
        or style.overline
        or style.link
    )


def _common_prefix(first: str, second: str) -> int:
    """The length of the longest common prefix, by halving slices (compared in C) rather than char by char."""
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _same(old: Text, new: Text) -> bool:
    return old is new or (old.plain == new.plain and old.spans == new.spans and old.style == new.style)
