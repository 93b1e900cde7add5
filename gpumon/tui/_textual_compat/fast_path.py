"""A Textual workaround: draws plain panes without StylesCache (checked on the Textual versions in CHECKED).

What it replaces, and why: on every frame in which any part of a widget changed, Textual's compositor asks the widget
for all its lines, and `Widget.render_lines` sends each one through `StylesCache` (borders, padding, tint, opacity,
hatch, link hover styles), which costs several times more CPU than the pane's own cached Strips. For a pane whose
box has nothing around its content but a top border, `render_plain_box` hands those Strips over as they are and lets
Textual draw only the border row. `SegmentBuilder` is Rich's `Text.render` + `Strip.adjust_cell_length` +
`Strip.apply_style` in one pass, with the combined styles cached across redraws and, where the app's line filter is
Textual's default one, already filtered (`StyleFinish`). `cached_lines` hands back any widget's lines (a plain box's
border row too) straight from its StylesCache when none of them changed, without `render_widget`'s per-call
preamble.

It reads Textual internals that may change in any release (`Widget.hover_style._link_id`, the order in which
StylesCache applies the background and line filters, StylesCache's `_cache`, `_dirty_lines` and `_width`), so it is
imported only on the Textual versions it was checked on (gpumon.tui._textual_compat.CHECKED); with any other
the panes fall back to Textual's own path.
tests/tui/test_textual_compat.py checks it is off outside CHECKED, and checks that
the fast path draws exactly what Textual draws.

`drawn_text` (Rich internals: what `Text(plain)` stores) is here for the same reason; tests/tui/test_render_path.py
checks it builds what Rich's own `Text` builds.
"""

from __future__ import annotations

from collections.abc import Callable
from weakref import WeakKeyDictionary

from rich.cells import cell_len
from rich.console import Console
from rich.containers import Lines
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.filter import LineFilter
from textual.geometry import Region, Spacing
from textual.strip import Strip
from textual.widget import Widget

from gpumon.tui._textual_compat.public import StyleFinish, style_finish

_NO_SPACING = Spacing(0, 0, 0, 0)


def plain_box(widget: Widget) -> bool:
    """Nothing around the content but, at most, a top border: no side or bottom border, padding, outline, tint,
    opacity or hatch (what `render_plain_box` can draw without Textual's StylesCache)."""
    styles = widget.styles
    (_, (right, _), (bottom, _), (left, _)) = styles.border
    return not (
        right
        or bottom
        or left
        or any(edge for edge, _ in styles.outline)
        or styles.padding != _NO_SPACING
        or styles.tint.a
        or widget.opacity != 1.0
        or styles.text_opacity != 1.0
        or styles.has_rule("hatch")
        or widget.hover_style._link_id
        or widget.size.width != widget.region.width
    )


def render_plain_box(
    widget: Widget, crop: Region, content_lines: int, render_line: Callable[[int, StyleFinish | None], Strip]
) -> list[Strip]:
    """The lines of `crop` of a plain-box widget (see `plain_box`) as StylesCache would draw them: the top border row
    by Textual itself (from its StylesCache while valid, `cached_lines`), each content line from `render_line` padded
    with the background, then the line filters.

    `render_line(y, finish)` builds line `y` with `finish` applied to every style (see `StyleFinish`); where the
    filters are Textual's default one, those lines come out already filtered and are not filtered again."""
    width = widget.size.width
    first_content = 1 if widget.styles.border_top[0] else 0
    base_background, background = widget.background_colors
    inner = Style(bgcolor=(base_background + background).rich_color)
    filters = widget.get_line_filters()
    finish = style_finish(filters, background)
    strips: list[Strip] = []
    for y in crop.line_range:
        if y < first_content:
            row = Region(0, y, width, 1)
            strips.append((cached_lines(widget, row) or Widget.render_lines(widget, row))[0])  # filtered already
            continue
        content_y = y - first_content
        if content_y < content_lines:
            strip = render_line(content_y, finish).adjust_cell_length(width, inner)
            if finish is not None and strip.cell_length == width:
                strips.append(strip)
                continue
        else:
            strip = Strip.blank(width, inner)
        for line_filter in filters:
            strip = strip.apply_filter(line_filter, background)
        strips.append(strip)
    if crop.column_span != (0, width):
        x1, x2 = crop.column_span
        strips = [strip.crop(x1, x2) for strip in strips]
    return strips


def cached_lines(widget: Widget, crop: Region) -> list[Strip] | None:
    """`Widget.render_lines(crop)` where StylesCache holds every line of `crop`, still valid: the cached lines with the
    line filters, without `render_widget`'s preamble (title styles, ANSI theme and the rest, which only lines drawn
    again need). None where a line must be drawn, or where hovered links would be restyled.

    Textual's compositor asks every widget under the frame's changed area for its lines, so the screen, containers
    and footer around the panes pay that preamble every frame, for lines that have not changed. The filtered lines
    are kept while the cached ones are the same objects (StylesCache draws a line again, as a new Strip, whenever
    anything it depends on changes, the background colours included)."""
    cache = widget._styles_cache
    width = widget.region.width
    if (
        widget.BLANK
        or cache._width != width
        or not cache._dirty_lines.isdisjoint(crop.line_range)
        or (widget.auto_links and widget.hover_style._link_id)
    ):
        return None
    held = cache._cache
    sources: list[Strip] = []
    for y in crop.line_range:
        strip = held.get(y)
        if strip is None:
            return None
        sources.append(strip)
    filters = tuple(widget.get_line_filters())
    kept = _FILTERED.get(widget)
    if kept is not None and kept[0] == crop and kept[1] == filters and kept[2] == sources:
        return list(kept[3])
    strips = sources
    if filters:
        background = widget.background_colors[1]
        for line_filter in filters:
            strips = [strip.apply_filter(line_filter, background) for strip in strips]
    if crop.column_span != (0, width):
        x1, x2 = crop.column_span
        strips = [strip.crop(x1, x2) for strip in strips]
    _FILTERED[widget] = (crop, filters, sources, strips)
    return list(strips)


_FILTERED: WeakKeyDictionary[Widget, tuple[Region, tuple[LineFilter, ...], list[Strip], list[Strip]]] = (
    WeakKeyDictionary()
)
"""Per widget, the last `cached_lines`: its crop, the filters, the cached lines and what they gave."""


def text_cell_lines(
    console: Console, cell: Text, width: int, padding: int, pre_style: Style, post_style: Style | None
) -> list[list[Segment]] | None:
    """A one-line DataTable cell as `DataTable._render_cell` draws it (Rich's `render_lines` of
    `Styled(Padding(cell, (0, padding)), pre_style, post_style)` at `width`, one line, no wrapping), without Rich's
    renderable pipeline; None for a cell this does not cover (wrapping, several lines, tabs, centred or full
    justification, or too wide without a justification to cut it), which Textual then draws itself."""
    inner = width - 2 * padding
    plain = cell.plain
    justify = cell.justify or "default"
    if (
        not cell.no_wrap
        or inner <= 0
        or padding < 0
        or "\n" in plain
        or "\t" in plain
        or justify not in ("left", "right", "default")
        or (justify == "default" and cell.cell_len > inner)
    ):
        return None
    if not cell.spans and plain:
        lines = _plain_cell_lines(console, cell, plain, justify, inner, padding, pre_style, post_style)
        if lines is not None:
            return lines
    text = cell.copy()
    if justify != "default":
        Lines([text]).justify(console, inner, justify=justify, overflow=cell.overflow or "fold")
    text.rstrip_end(inner)
    text = _NEWLINE.join([text])  # as Text.__rich_console__ does: the line's own style becomes its first span
    edge = Segment(" " * padding, _NULL_STYLE)
    segments = [edge, *text.render(console, end="")] if padding else list(text.render(console, end=""))
    room = inner - text.cell_len
    if room > 0:
        segments.append(Segment(" " * room, _NULL_STYLE))
    if padding:
        segments.append(edge)
    return [list(Segment.apply_style(segments, pre_style, post_style))]


def _plain_cell_lines(
    console: Console,
    cell: Text,
    plain: str,
    justify: str,
    inner: int,
    padding: int,
    pre_style: Style,
    post_style: Style | None,
) -> list[list[Segment]] | None:
    """`text_cell_lines` for a cell without spans, as Rich's steps leave it without making their Texts: justified to
    `inner` cells with spaces that take the cell's style (right: its trailing spaces dropped first), or followed by
    unstyled room (no justification). None where the cell is too wide (Rich's steps cut it)."""
    if justify == "right":
        plain = plain.rstrip()
    length = cell_len(plain)
    if length > inner:
        return None
    room = inner - length
    if justify == "right":
        plain, room = " " * room + plain, 0
    elif justify == "left":
        plain, room = plain + " " * room, 0
    style = console.get_style(cell.style) if cell.style and plain else None  # Text.join's span, as Text.render reads it
    edge = Segment(" " * padding, _NULL_STYLE)
    segments = [edge, Segment(plain, style)] if padding else [Segment(plain, style)]
    if room > 0:
        segments.append(Segment(" " * room, _NULL_STYLE))
    if padding:
        segments.append(edge)
    return [list(Segment.apply_style(segments, pre_style, post_style))]


_NULL_STYLE = Style.null()
_NEWLINE = Text("\n")


def drawn_text(plain: str, spans: list[Span] | None = None, style: str = "") -> Text:
    """A one-line Text of characters this module draws (no control codes): Rich's Text() would strip control codes
    with str.translate, which costs a few microseconds on every braille row of every redraw."""
    text = Text(style=style, no_wrap=True, end="", spans=spans)
    text._text = [plain]  # what Text(plain) stores (Rich private), without the translate pass
    text._length = len(plain)
    return text
