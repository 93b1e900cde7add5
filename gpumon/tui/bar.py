"""Horizontal percentage bars in eighth-cell steps, for one-line gauges."""

from __future__ import annotations

import math

from rich.style import StyleType
from rich.text import Span, Text

from gpumon import units
from gpumon.tui.glyphs import ascii_only

_PARTIAL = " ▏▎▍▌▋▊▉"
_FULL = "█"
EMPTY = "·"
"""Drawn for the empty part of a bar so that a low value still shows the bar's length."""
ASCII_FULL = "#"
ASCII_EMPTY = "."
"""In ASCII (glyphs.ascii_only), a bar fills whole cells."""


def filled_steps(percent: float | None, width: int) -> int | None:
    """How much of a bar `width` cells wide `percent` (0-100, clamped) fills: in eighths of a cell, or in whole cells
    in ASCII (glyphs.ascii_only); None for no figure. Two percents with the same steps draw the same bar."""
    if percent is None or math.isnan(percent):
        return None
    return round(min(100.0, max(0.0, percent)) / 100.0 * width * (1 if ascii_only() else 8))


def bar_string(percent: float | None, width: int) -> str:
    """`width` cells filled in proportion to percent (0-100, clamped); blank when percent is None."""
    if width <= 0:
        return ""
    steps = filled_steps(percent, width)
    if steps is None:
        return " " * width
    if ascii_only():
        return ASCII_FULL * steps + ASCII_EMPTY * (width - steps)
    full, remainder = divmod(steps, 8)
    body = _FULL * full
    if remainder and full < width:
        body += _PARTIAL[remainder]
    return body + EMPTY * (width - len(body))


def bar(percent: float | None, width: int, style: StyleType = "") -> Text:
    """The bar as Text: filled part in `style`, empty part dim."""
    cells = bar_string(percent, width)
    return Text(cells, style=style, no_wrap=True, end="", spans=_empty_part(cells, 0))


def bar_spans(percent: float | None, width: int, style: StyleType, offset: int) -> tuple[str, list[Span]]:
    """The bar's cells and the spans that appending bar(percent, width, style) at `offset` adds to a line.

    For lines of many bars (a core grid), where building a Text per bar and appending it costs several times more.
    """
    cells = bar_string(percent, width)
    return cells, bar_cell_spans(cells, style, offset)


def bar_cell_spans(cells: str, style: StyleType, offset: int) -> list[Span]:
    """The spans of bar cells (bar_string's) placed at `offset`: the filled part in `style`, the empty part dim."""
    spans = [Span(offset, offset + len(cells), style)] if style else []
    return spans + _empty_part(cells, offset)


def _empty_part(cells: str, offset: int) -> list[Span]:
    filled = len(cells.rstrip(EMPTY + ASCII_EMPTY + " "))
    return [Span(offset + filled, offset + len(cells), "bright_black")] if filled < len(cells) else []


def level_style(percent: float | None) -> str:
    """A colour by load: green under 60%, yellow under 85%, red above."""
    if percent is None or math.isnan(percent):
        return "bright_black"
    if percent < 60:
        return "green"
    if percent < 85:
        return "yellow"
    return "red"


def gauge_line(label: str, percent: float | None, bar_width: int, percent_width: int, spark: str, style: str) -> Text:
    """'Util   ████▌··· 97% ▁▂▃▅▇█': the label, a bar, the percentage and a sparkline, bar and sparkline in `style`.

    The same Text as appending bar(), the percentage and the sparkline to Text(label), built in one go.
    """
    cells, spans = bar_spans(percent, bar_width, style, len(label))
    plain = f"{label}{cells} {units.percent(percent).rjust(percent_width)} "
    if spark and style:
        spans.append(Span(len(plain), len(plain) + len(spark), style))
    return Text(plain + spark, no_wrap=True, end="", spans=spans)
