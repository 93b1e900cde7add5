"""Which cells of a pane's line look different between two drawings of it, as the runs a frame sends."""

from __future__ import annotations

import re
from typing import NamedTuple

from rich.cells import cell_len
from rich.errors import StyleSyntaxError
from rich.style import Style
from rich.text import Text
from textual.geometry import Region

# A line is held as one int, 32 bits (a lane) a character: its UTF-32 codes, little-endian, so that comparing two
# lines, or masking a run of cells, is a few operations on ints in C instead of a step per character in Python.
_LANE_BITS = 32
_CODE_BITS = 21
"""No code point is 2**21 or more (the highest is 0x10FFFF): adding 2**21 - 1 to a lane carries into its bit 21 when
the lane is not 0, and never out of the lane."""


class _Lanes(NamedTuple):
    """The constants of one line length."""

    ones: int
    """1 in every lane."""
    below_top: int
    """2**21 - 1 in every lane."""
    top: int
    """Bit 21 of every lane."""
    spaces: int
    """The codes of a line of blanks."""


def changed_regions(y: int, old: Text, new: Text, width: int) -> list[Region]:
    """The cells of line `y` that look different between two drawings of it, as runs: only these are sent to the
    terminal (a graph moving on by half a braille cell changes one cell a row; a colour change over blank cells
    changes none). Two runs closer than a cursor move's bytes are sent as one. The whole line where base styles or
    widths differ."""
    before, after = old.plain, new.plain
    length = len(after)
    if old.style != new.style or len(before) != length or cell_len(before) != length or cell_len(after) != length:
        return [Region(0, y, width, 1)]
    old_spans, new_spans = old.spans, new.spans
    spans_differ = old_spans != new_spans
    if before == after and not spans_differ:
        return []
    lanes = _lanes(length)
    codes_before, codes_after = _codes(before), _codes(after)
    changed = _nonzero(codes_before ^ codes_after, lanes) if before != after else 0
    if spans_differ:
        shown = -1
        added = set(new_spans)
        for span in added.symmetric_difference(old_spans):
            first, last = span.start, min(span.end, length)
            if first >= last:
                continue
            run = lanes.ones & ((1 << (_LANE_BITS * last)) - (1 << (_LANE_BITS * first)))
            if _shows_nothing_on_blanks(span.style):
                # Over a blank cell a colour shows nothing: it changes the cells with a mark on them (in either
                # drawing: a cell blank in one and marked in the other has changed already).
                if shown < 0:
                    shown = _nonzero(codes_after ^ lanes.spaces, lanes)
                run &= shown
            changed |= run
    if not changed:
        return []
    return _runs(y, changed.to_bytes(4 * length, "little")[0::4], after)


def _runs(y: int, cells: bytes, text: str) -> list[Region]:
    """The regions of the changed cells (a byte a cell, 0 where unchanged), runs closer than a cursor move joined."""
    regions: list[Region] = []
    run_start = run_end = -1
    for run in _CHANGED_RUN.finditer(cells):
        start = run.start()
        gap = start - run_end
        if (
            run_end >= 0
            and gap > _ALWAYS_JOINED
            and (
                gap > _CURSOR_MOVE_BYTES
                or len(text[run_end:start].encode("utf-8", "surrogatepass")) > _CURSOR_MOVE_BYTES
            )
        ):
            regions.append(Region(run_start, y, run_end - run_start, 1))
            run_start = -1
        if run_start < 0:
            run_start = start
        run_end = run.end()
    if run_end >= 0:
        regions.append(Region(run_start, y, run_end - run_start, 1))
    return regions


_CURSOR_MOVE_BYTES = 8
"""About what moving the cursor past unchanged cells costs (ESC [ row ; column H)."""
_ALWAYS_JOINED = 2
"""Runs this many cells apart or closer are joined whatever the cells between hold (none is over 4 bytes in UTF-8)."""
_CHANGED_RUN = re.compile(b"[^\x00]+(?:\x00{1,%d}[^\x00]+)*" % _ALWAYS_JOINED)


def _codes(text: str) -> int:
    return int.from_bytes(text.encode("utf-32-le", "surrogatepass"), "little")


def _nonzero(codes: int, lanes: _Lanes) -> int:
    """1 in each lane of `codes` that is not 0, 0 in the others."""
    return ((codes + lanes.below_top) & lanes.top) >> _CODE_BITS


def _lanes(length: int) -> _Lanes:
    lanes = _LANES.get(length)
    if lanes is None:
        ones = int.from_bytes(b"\x01\x00\x00\x00" * length, "little")
        lanes = _Lanes(ones, ones * ((1 << _CODE_BITS) - 1), ones << _CODE_BITS, _codes(" " * length))
        if len(_LANES) >= _LANES_MAX:
            _LANES.clear()
        _LANES[length] = lanes
    return lanes


_LANES: dict[int, _Lanes] = {}
_LANES_MAX = 256
"""Line lengths kept (a dashboard's lines come in a few widths; a resize brings new ones)."""


def _shows_nothing_on_blanks(style: str | Style) -> bool:
    """Whether a span's style is invisible on blank cells: nothing a blank shows (a background, reverse, a line
    through or under it, a link). Kept per style (a pane's spans use a few dozen)."""
    invisible = _INVISIBLE_ON_BLANKS.get(style)
    if invisible is None:
        try:
            parsed = style if isinstance(style, Style) else Style.parse(style)
        except StyleSyntaxError:
            invisible = False
        else:
            invisible = not (
                parsed.bgcolor is not None
                or parsed.reverse
                or parsed.underline
                or parsed.underline2
                or parsed.strike
                or parsed.overline
                or parsed.link
            )
        if len(_INVISIBLE_ON_BLANKS) >= _INVISIBLE_ON_BLANKS_MAX:
            _INVISIBLE_ON_BLANKS.clear()
        _INVISIBLE_ON_BLANKS[style] = invisible
    return invisible


_INVISIBLE_ON_BLANKS: dict[str | Style, bool] = {}
_INVISIBLE_ON_BLANKS_MAX = 1024
