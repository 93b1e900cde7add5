"""A Textual workaround: a frame sends only the cells that changed, not a widget's line from its left edge (checked on
the Textual versions in CHECKED).

What it replaces, and why: in a partial update Textual's compositor knows which cells of each line changed (the
widgets' refresh regions), but `ChopsUpdate.render_segments` crops a widget's piece of the line ("chop") only at the
right: it moves the cursor to the chop's left edge and sends everything from there. A graph row that changed only in
its newest cell went out whole, label and axis included. `PreciseChopsUpdate` crops the left end as well, so the
terminal gets the changed cells alone; each cell shows what it showed before. It renders the cells it crops straight
from the strip's segments, as `Strip.render` does, without making a cropped Strip (Strip.crop's copies and caches
cost more than the rendering).

A chop whose text holds a character not one cell wide (a wide East Asian character, a combining mark) keeps Textual's
left edge: a crop there could cut a wide character in two.

`PreciseCompositor` also asks the widgets for less: Textual's partial update asks every widget overlapping the
bounding box of the changed regions for all its visible lines (the panes, the process table, and the containers and
screen behind them, whose lines their children cover), then sends only the pieces in the changed spans. It asks each
widget only for the rows where it is the front widget of a piece that is sent, and none once every piece is filled
(5.5 -> 4.8 ms of frame work a snapshot, benchmarks/tui_render_cost.py on the 2x H200 recording).

It subclasses the private `ChopsUpdate` and `Compositor` (its `cuts`, `visible_widgets` and `_dirty_regions`) and sets
the private `Screen._compositor`, so it is used only with the Textual versions it was written against.
tests/tui/test_textual_precise_update.py checks, on a terminal emulator, that every frame of the dashboard leaves the
screen as Textual's own frames do, and as the whole screen redrawn then, and that each piece sent is the one
Textual's own partial update draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip


class PreciseChopsUpdate(ChopsUpdate):
    """A ChopsUpdate that sends the changed cells only (see the module's docstring)."""

    def render_segments(self, console: Console) -> str:
        sequences: list[str] = []
        append = sequences.append
        chops = self.chops
        chop_ends = self.chop_ends
        last_y = self.spans[-1][0]
        for y, x1, x2 in self.spans:
            for end, (x, strip) in zip(chop_ends[y], chops[y].items(), strict=False):
                if strip is None or x >= x2 or end <= x1:
                    continue
                if x1 <= x and end <= x2:
                    append(f"\x1b[{y + 1};{x + 1}H")
                    append(strip.render(console))
                    continue
                start, stop = max(x1 - x, 0), min(end, x2) - x
                cells = _cells(strip, start, stop, console)
                if cells is None:  # Textual's own crop, from the chop's left edge
                    start, cells = 0, strip.crop(0, stop).render(console)
                append(f"\x1b[{y + 1};{x + start + 1}H")
                append(cells)
            if y != last_y:
                append("\n")
        return "".join(sequences)


def _cells(strip: Strip, start: int, stop: int, console: Console) -> str | None:
    """Cells `start` to `stop` of a strip rendered as `Strip.render` renders them (without making the cropped Strip);
    None where a character up to `stop` is not one cell wide (a crop could cut it in two)."""
    color_system = console._color_system or ColorSystem.TRUECOLOR
    render_style = Strip.render_style
    pieces: list[str] = []
    position = 0
    for text, style, _ in strip:
        length = len(text)
        if not (text.isascii() and text.isprintable()) and cell_len(text) != length:
            return None
        if position + length > start:
            piece = text[max(start - position, 0) : stop - position]
            if piece:
                pieces.append(piece if style is None else render_style(style, piece, color_system))
        position += length
        if position >= stop:
            break
    return "".join(pieces)


class PreciseCompositor(Compositor):
    """A Compositor whose partial updates are PreciseChopsUpdates, drawn from only the lines they send."""

    def render_partial_update(self) -> ChopsUpdate | None:
        """`Compositor.render_partial_update`, asking each widget only for the lines of it that the update sends.

        Textual asks every widget that overlaps the bounding box of the update for all its visible lines and keeps,
        per line, the front widget's piece of each chop; the pieces outside the changed spans are never sent. Here
        the widgets are visited in the same front-to-back order, each asked for the rows (first to last) where it
        is the front widget of a chop the update sends, and the visit stops once every such chop is filled: a
        container or screen hidden behind its children is not asked at all."""
        update_regions = self._dirty_regions.copy()
        self._dirty_regions.clear()
        if not update_regions:
            return None
        spans = list(self._regions_to_spans(update_regions))
        cuts = self.cuts
        chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
        wanted = _wanted_chops(spans, cuts)
        if wanted:
            self._fill(chops, wanted)
        return PreciseChopsUpdate(chops, spans, [cut_set[1:] for cut_set in cuts])

    def _fill(self, chops: list[dict[int, Strip | None]], wanted: dict[int, set[int]]) -> None:
        """Put in `chops` the front widget's piece of each wanted chop (line -> the chops' left edges)."""
        cuts = self.cuts
        left = sum(len(starts) for starts in wanted.values())
        first_line, last_line = min(wanted), max(wanted)
        for widget, (region, clip) in self.visible_widgets.items():
            x, y, width, height = region.intersection(clip)
            if not (width and height):
                continue
            end = x + width
            rows = [
                line
                for line in range(max(y, first_line), min(y + height, last_line + 1))
                if any(x <= start < end for start in wanted.get(line, ()))
            ]
            if not rows:
                continue
            top = rows[0]
            strips = widget.render_lines(Region(x - region.x, top - region.y, width, rows[-1] - top + 1))
            for line in rows:
                strip = strips[line - top] if line - top < len(strips) else None
                if strip is None:
                    continue
                line_cuts = [cut for cut in cuts[line] if x <= cut <= end]
                starts = wanted[line]
                chops_line = chops[line]
                if len(line_cuts) == 2 and strip.cell_length == width:
                    pieces: Sequence[Strip] = (strip,)  # what divide gives for one cut at the end, without its cache
                else:
                    pieces = strip.divide([cut - x for cut in line_cuts[1:]])
                for start, piece in zip(line_cuts, pieces, strict=False):
                    if start in starts:
                        chops_line[start] = piece
                        starts.discard(start)
                        left -= 1
                if not starts:
                    del wanted[line]
            if not left:
                return
            first_line, last_line = min(wanted), max(wanted)


def _wanted_chops(spans: list[tuple[int, int, int]], cuts: list[list[int]]) -> dict[int, set[int]]:
    """Per line, the left edges of the chops that reach into the line's changed spans (those a frame sends)."""
    wanted: dict[int, set[int]] = {}
    for line, x1, x2 in spans:
        if line >= len(cuts):
            continue
        line_cuts = cuts[line]
        starts = {start for start, end in pairwise(line_cuts) if start < x2 and end > x1}
        if starts:
            wanted.setdefault(line, set()).update(starts)
    return wanted


def send_changed_cells_only(screen: Screen[object]) -> None:
    """Give a freshly made screen (before its first layout) the PreciseCompositor."""
    screen._compositor = PreciseCompositor()
