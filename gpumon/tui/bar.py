"""Horizontal percentage bars in eighth-cell steps, for one-line gauges."""

from __future__ import annotations

import math

from rich.style import StyleType
from rich.text import Span, Text

_PARTIAL = " ▏▎▍▌▋▊▉"
_FULL = "█"
EMPTY = "·"
"""Drawn for the empty part of a bar so that a low value still shows the bar's length."""


def bar_string(percent: float | None, width: int) -> str:
    """`width` cells filled in proportion to percent (0-100, clamped); blank when percent is None."""
    if width <= 0:
        return ""
    if percent is None or math.isnan(percent):
        return " " * width
    eighths = int(round(min(100.0, max(0.0, percent)) / 100.0 * width * 8))
    full, remainder = divmod(eighths, 8)
    body = _FULL * full
    if remainder and full < width:
        body += _PARTIAL[remainder]
    return body + EMPTY * (width - len(body))


def bar(percent: float | None, width: int, style: StyleType = "") -> Text:
    """The bar as Text: filled part in `style`, empty part dim."""
    cells = bar_string(percent, width)
    filled = len(cells.rstrip(EMPTY + " "))
    spans = [Span(filled, len(cells), "bright_black")] if filled < len(cells) else []
    return Text(cells, style=style, no_wrap=True, end="", spans=spans)


def level_style(percent: float | None) -> str:
    """A colour by load: green under 60%, yellow under 85%, red above."""
    if percent is None or math.isnan(percent):
        return "bright_black"
    if percent < 60:
        return "green"
    if percent < 85:
        return "yellow"
    return "red"
