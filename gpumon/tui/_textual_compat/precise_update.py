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

It subclasses the private `ChopsUpdate` and `Compositor` and sets the private `Screen._compositor`, so it is used only
with the Textual versions it was written against. tests/tui/test_textual_precise_update.py checks, on a terminal
emulator, that every frame of the dashboard leaves the screen as Textual's own frames do, and as the whole
screen redrawn then.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from textual._compositor import ChopsUpdate, Compositor
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
        if cell_len(text) != length:
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
    """A Compositor whose partial updates are PreciseChopsUpdates."""

    def render_partial_update(self) -> ChopsUpdate | None:
        update = super().render_partial_update()
        if update is None:
            return None
        return PreciseChopsUpdate(update.chops, update.spans, update.chop_ends)


def send_changed_cells_only(screen: Screen[object]) -> None:
    """Give a freshly made screen (before its first layout) the PreciseCompositor."""
    screen._compositor = PreciseCompositor()
