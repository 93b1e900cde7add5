"""Base classes of the dashboard panes and the title bar: Line API widgets whose lines are built for whatever width
they get."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.markup import escape
from textual.strip import Strip
from textual.widget import Widget

from gpumon.printable import printable
from gpumon.tui._textual_compat import SegmentBuilder, StyleFinish, lean_strip, plain_box, render_plain_box
from gpumon.tui.changed_cells import changed_regions
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
        self._fitted: tuple[int, dict[int, Text]] = (-1, {})
        """(width, the lines of the last build by id): lines made printable and cut to that width already (graph
        rows and axes come back from their caches as the same Text, frame after frame)."""

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
            if strips is not None and previous is not None and strips[0] == width:
                self._strips = (width, strips[1], strips[2], _kept_strips(previous, strips[3], self.lines(width)))
        else:
            pairs = zip(previous, self.lines(width), strict=False)
            changed = [(y, old, new) for y, (old, new) in enumerate(pairs) if not _same(old, new)]
            if strips is not None and strips[0] == width and len(strips[3]) == line_count:
                kept = list(strips[3])
                for y, _, _ in changed:
                    kept[y] = None
                self._strips = (width, strips[1], strips[2], kept)
            regions = [region for y, old, new in changed for region in changed_regions(y, old, new, width)]
            if regions:
                self.refresh(*regions)
        self._line_count = line_count

    def lines(self, width: int) -> list[Text]:
        """The pane's lines at a width, made printable and cut to fit it (built once per width and update)."""
        if self._build is None:
            return []
        if self._lines is None or self._lines[0] != width:
            fitted = self._fitted[1] if self._fitted[0] == width else {}
            lines: list[Text] = []
            for line in self._build(width):
                if fitted.get(id(line)) is not line:
                    line = printable_text(line)
                    line.truncate(width, overflow="ellipsis")
                lines.append(line)
            self._fitted = (width, {id(line): line for line in lines})
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
                    strip = finish.strip(strip)
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


def _kept_strips(previous: list[Text], strips: list[Strip | None], lines: list[Text]) -> list[Strip | None]:
    """Per line of `lines`, the Strip drawn for the same Text among the `previous` lines, where there is one (a pane
    one line taller or shorter keeps most of its lines: its graph rows and axes come from caches)."""
    drawn = {id(line): (line, strip) for line, strip in zip(previous, strips, strict=False) if strip is not None}
    kept: list[Strip | None] = []
    for line in lines:
        same = drawn.get(id(line))
        kept.append(same[1] if same is not None and same[0] is line else None)
    return kept


def _same(old: Text, new: Text) -> bool:
    return old is new or (old.plain == new.plain and old.spans == new.spans and old.style == new.style)
