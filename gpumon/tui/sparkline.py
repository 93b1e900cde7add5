"""Sparklines on a fixed scale (0-100% by default), unlike Textual's min-max Sparkline: one line, or several."""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.style import StyleType
from rich.text import Text

from gpumon.tui.glyphs import ascii_only, forget_on_change

BLOCKS = "▁▂▃▄▅▆▇█"
"""Eight levels: the lowest block is the bottom of the scale, the full block its top."""
ASCII_BLOCKS = "_.-:=+*#"
"""The same eight levels in ASCII (glyphs.ascii_only)."""
BLANK = " "
"""Drawn for a missing sample (None) and for the part of the window with no history yet."""


def spark_string(values: Sequence[float | None], width: int, maximum: float = 100.0, minimum: float = 0.0) -> str:
    """The newest `width` values as block characters, right-aligned; None is blank.

    The scale is fixed: `minimum` (and below) draws the lowest block and `maximum` (and above) the
    full block, whatever the other values are.
    """
    if width <= 0:
        return ""
    recent = list(values)[-width:]
    if len(recent) < width or width == 1:
        return BLANK * (width - len(recent)) + _cells(recent, maximum, minimum)
    # A full window one sample newer than a sparkline drawn before: reuse that one's cells, shifted by one.
    head = _SHIFTED.pop((width, maximum, minimum, *recent[:-1]), None)
    line = head + _cells(recent[-1:], maximum, minimum) if head is not None else _cells(recent, maximum, minimum)
    if len(_SHIFTED) >= _SHIFTED_MAX:
        _SHIFTED.clear()
    shifted_key = (width, maximum, minimum, *recent[1:])
    _SHIFTED[shifted_key] = line[1:]
    return line


def spark_rows(
    values: Sequence[float | None], rows: int, width: int, maximum: float = 100.0, minimum: float = 0.0
) -> list[str]:
    """The sparkline `rows` lines tall, top line first, on the same fixed scale with rows x 8 levels.

    One row is spark_string. A value fills its column from the bottom: `minimum` the lowest block of the
    bottom line, `maximum` every line; None leaves the column blank.
    """
    if rows <= 1:
        return [spark_string(values, width, maximum, minimum)]
    if width <= 0:
        return [""] * rows
    recent = list(values)[-width:]
    span, top = maximum - minimum, rows * 8 - 1
    heights = [
        0
        if value is None or value != value
        else 1
        if span <= 0
        else 1 + int(min(1.0, max(0.0, (value - minimum) / span)) * top + 0.5)
        for value in recent
    ]
    padding = BLANK * (width - len(recent))
    blocks = ASCII_BLOCKS if ascii_only() else BLOCKS
    return [
        padding
        + "".join([BLANK if (level := height - 8 * row) <= 0 else blocks[min(level, 8) - 1] for height in heights])
        for row in range(rows - 1, -1, -1)
    ]


_SHIFTED: dict[tuple[float | None, ...], str] = {}
"""(width, maximum, minimum, the newest width-1 values of a sparkline drawn) -> their cells, for its successor."""
_SHIFTED_MAX = 256
forget_on_change(_SHIFTED.clear)


def _cells(values: list[float | None], maximum: float, minimum: float) -> str:
    """One block character per value on the fixed scale (a blank for None or NaN)."""
    span = maximum - minimum
    blocks = ASCII_BLOCKS if ascii_only() else BLOCKS
    lowest, highest, top = blocks[0], blocks[-1], len(blocks) - 1
    if span <= 0:
        return "".join([BLANK if value is None or value != value else lowest for value in values])
    # Clamp to the scale, then round to the nearest of the eight levels (one expression: this runs per cell).
    return "".join(
        [
            BLANK
            if value is None or value != value
            else lowest
            if (fraction := (value - minimum) / span) <= 0.0
            else highest
            if fraction >= 1.0
            else blocks[int(fraction * top + 0.5)]
            for value in values
        ]
    )


def window_maximum(values: Sequence[float | None]) -> float:
    """The largest sample in a window (0.0 when none), the top of the scale for rate sparklines."""
    present = [value for value in values if value is not None and not math.isnan(value)]
    return max(present, default=0.0)


class Sparkline:
    """Rich renderable of one sparkline line, `width` cells wide (or the available width when None)."""

    def __init__(
        self,
        values: Sequence[float | None],
        width: int | None = None,
        *,
        maximum: float = 100.0,
        style: StyleType = "",
    ) -> None:
        self.values = values
        self.width = width
        self.maximum = maximum
        self.style = style

    def text(self, width: int | None = None) -> Text:
        width = self.width if width is None else width
        if width is None:
            width = len(self.values)
        return Text(spark_string(self.values, width, self.maximum), style=self.style, no_wrap=True, end="")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width if self.width is None else min(self.width, options.max_width)
        yield self.text(width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        width = options.max_width if self.width is None else min(self.width, options.max_width)
        return Measurement(width, width)
