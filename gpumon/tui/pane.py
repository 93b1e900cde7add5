"""Base class of the dashboard panes: a Line API widget whose lines are built for whatever width it gets."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

LineBuilder = Callable[[int], list[Text]]
"""Builds a pane's lines for a content width in cells."""


class Pane(Widget):
    """A pane redrawn with `show_lines`; it asks for a layout pass only when its number of lines changes.

    Lines are turned into Strips directly (Textual's Line API) rather than through a Rich renderable, which
    costs several times less CPU per redraw. A resize rebuilds them at the new width, so sparklines follow it.
    """

    DEFAULT_CSS = """
    Pane {
        height: auto;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._build: LineBuilder | None = None
        self._lines: tuple[int, list[Text]] | None = None
        self._strips: tuple[int, list[Strip | None]] | None = None
        self._line_count = -1

    def show_lines(self, build: LineBuilder) -> None:
        """Redraw from a new builder: a layout pass if the line count changed, else only the lines that changed."""
        width = self.size.width
        previous = self._lines[1] if self._lines is not None and self._lines[0] == width else None
        self._build = build
        self._lines = None
        self._strips = None
        line_count = len(self.lines(width)) if width > 0 else -1
        if line_count != self._line_count or line_count < 0 or previous is None:
            self.refresh(layout=line_count != self._line_count or line_count < 0)
        else:
            changed = [
                Region(0, y, width, 1)
                for y, (old, new) in enumerate(zip(previous, self.lines(width)))
                if not _same(old, new)
            ]
            if changed:
                self.refresh(*changed)
        self._line_count = line_count

    def lines(self, width: int) -> list[Text]:
        """The pane's lines at a width, each cut to fit it (built once per width and update)."""
        if self._build is None:
            return []
        if self._lines is None or self._lines[0] != width:
            lines = self._build(width)
            for line in lines:
                line.truncate(width, overflow="ellipsis")
            self._lines = (width, lines)
        return self._lines[1]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines(width))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        lines = self.lines(width)
        if self._strips is None or self._strips[0] != width:
            self._strips = (width, [None] * len(lines))
        strips = self._strips[1]
        if y >= len(strips):
            return Strip.blank(width, self.visual_style.rich_style)
        strip = strips[y]
        if strip is None:
            line = lines[y]
            strip = Strip(line.render(self.app.console, end=""), line.cell_len)
            strip = strips[y] = strip.adjust_cell_length(width).apply_style(self.visual_style.rich_style)
        return strip


def _same(old: Text, new: Text) -> bool:
    return old.plain == new.plain and old.spans == new.spans and old.style == new.style
