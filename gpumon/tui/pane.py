"""Base classes of the dashboard panes and the title bar: Line API widgets whose lines are built for whatever width
they get."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter

from rich.console import Console
from rich.segment import Segment
from rich.style import Style, StyleType
from rich.text import Text
from textual.geometry import Region, Size, Spacing
from textual.markup import escape
from textual.strip import Strip
from textual.widget import Widget

from gpumon.printable import printable
from gpumon.tui.printable_text import printable_text

LineBuilder = Callable[[int], list[Text]]
"""Builds a pane's lines for a content width in cells."""


class LinesWidget(Widget):
    """A widget redrawn with `show_lines`; it asks for a layout pass only when its number of lines changes.

    Lines are turned into Strips directly (Textual's Line API) rather than through a Rich renderable, which
    costs several times less CPU per redraw. A resize rebuilds them at the new width, so sparklines follow it.
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._build: LineBuilder | None = None
        self._lines: tuple[int, list[Text]] | None = None
        self._strips: tuple[int, Style, list[Strip | None]] | None = None
        """(width, base style, one Strip per line or None where it must be built): kept for unchanged lines."""
        self._line_count = -1
        self._combined_styles: dict[tuple[Style, tuple[StyleType, ...]], Style | None] = {}

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
            changed = [y for y, (old, new) in enumerate(zip(previous, self.lines(width))) if not _same(old, new)]
            if strips is not None and strips[0] == width and len(strips[2]) == line_count:
                kept = list(strips[2])
                for y in changed:
                    kept[y] = None
                self._strips = (width, strips[1], kept)
            if changed:
                self.refresh(*(Region(0, y, width, 1) for y in changed))
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
        width = self.size.width
        lines = self.lines(width)
        base = self.visual_style.rich_style
        if self._strips is None or self._strips[0] != width or self._strips[1] != base \
                or len(self._strips[2]) != len(lines):
            self._strips = (width, base, [None] * len(lines))
        strips = self._strips[2]
        if y >= len(strips):
            return Strip.blank(width, base)
        strip = strips[y]
        if strip is None:
            line = lines[y]
            if line.cell_len <= width:
                strip = Strip(self._line_segments(line, width, base), width)
            else:
                strip = Strip(line.render(self.app.console, end=""), line.cell_len)
                strip = strip.adjust_cell_length(width).apply_style(base)
            strips[y] = strip
        return strip

    def plain_box(self) -> bool:
        """Nothing around the content but, at most, a top border: no side or bottom border, padding, outline,
        tint, opacity or hatch (what `render_lines` can draw without Textual's StylesCache)."""
        styles = self.styles
        (_, (right, _), (bottom, _), (left, _)) = styles.border
        return not (right or bottom or left or any(edge for edge, _ in styles.outline)
                    or styles.padding != _NO_SPACING or styles.tint.a or self.opacity != 1.0
                    or styles.text_opacity != 1.0 or styles.has_rule("hatch") or self.hover_style._link_id
                    or self.size.width != self.region.width)

    def render_lines(self, crop: Region) -> list[Strip]:
        """As Textual's StylesCache renders them, without its per-line work for a plain box.

        The compositor asks for the whole widget on every frame in which any of it changed. A pane's content
        lines are its own cached Strips, so where the box has nothing around them but a top border (no side
        borders, padding, outline, tint or opacity) they are handed over as they are, and Textual draws only
        the top border row. Anything else goes through Textual's StylesCache.
        """
        if not self.plain_box():
            return super().render_lines(crop)
        width = self.size.width
        first_content = 1 if self.styles.border_top[0] else 0
        base_background, background = self.background_colors
        inner = Style(bgcolor=(base_background + background).rich_color)
        filters = self.get_line_filters()
        strips: list[Strip] = []
        content_lines = len(self.lines(width))
        for y in crop.line_range:
            if y < first_content:
                strip = super().render_lines(Region(0, y, width, 1))[0]
            else:
                content_y = y - first_content
                if content_y < content_lines:
                    strip = self.render_line(content_y).adjust_cell_length(width, inner)
                else:
                    strip = Strip.blank(width, inner)
                for line_filter in filters:
                    strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        if crop.column_span != (0, width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _line_segments(self, line: Text, width: int, base: Style) -> list[Segment]:
        """What `Strip(line.render(console)).adjust_cell_length(width).apply_style(base)` gives, built in one pass.

        The same span walk as Text.render, with the combined styles cached across redraws (a pane uses a few dozen).
        Like Text.render, a line without spans is drawn without its own style.
        """
        plain = line.plain
        spans = line.spans
        add_base = base.__add__ if base else _unchanged
        if not spans:
            segments = [Segment(plain, add_base(None))]
        else:
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
            styles = self._combined_styles
            for (offset, leaving, index), (next_offset, _, _) in zip(edges, edges[1:]):
                if leaving:
                    stack.remove(index)
                else:
                    stack.append(index)
                if next_offset > offset:
                    key = (base, tuple(values[active] for active in sorted(stack)))
                    style = styles.get(key)
                    if style is None:
                        style = styles[key] = add_base(_combine(self.app.console, key[1]))
                    segments.append(Segment(plain[offset:next_offset], style))
        if line.cell_len < width:
            segments.append(Segment(" " * (width - line.cell_len), add_base(None)))
        return segments


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


_NO_SPACING = Spacing(0, 0, 0, 0)


def _unchanged(style: Style | None) -> Style | None:
    return style


def _combine(console: Console, values: tuple[StyleType, ...]) -> Style:
    return Style.combine(console.get_style(value, default=Style.null()) for value in values)


def _same(old: Text, new: Text) -> bool:
    return old.plain == new.plain and old.spans == new.spans and old.style == new.style
