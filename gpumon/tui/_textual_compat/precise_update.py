"""A Textual workaround: a frame sends only the cells that changed, not a widget's line from its left edge (checked on
the Textual versions in CHECKED).

What it replaces, and why: in a partial update Textual's compositor knows which cells of each line changed (the
widgets' refresh regions), but `ChopsUpdate.render_segments` crops a widget's piece of the line ("chop") only at the
right: it moves the cursor to the chop's left edge and sends everything from there. A graph row that changed only in
its newest cell went out whole, label and axis included. `PreciseChopsUpdate` crops the left end as well, so the
terminal gets the changed cells alone; each cell shows what it showed before.

A chop whose text holds a character not one cell wide (a wide East Asian character, a combining mark) keeps Textual's
left edge: a crop there could cut a wide character in two.

It subclasses the private `ChopsUpdate` and `Compositor` and sets the private `Screen._compositor`, so it is used only
with the Textual versions it was written against. tests/tui/test_textual_precise_update.py checks, on a terminal
emulator, that every frame of the dashboard leaves the screen as Textual's own frames do.
"""

from __future__ import annotations

from rich.cells import cell_len
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
                start = x1 - x if x1 > x and _one_cell_each(strip) else 0
                append(f"\x1b[{y + 1};{x + start + 1}H")
                append(strip.crop(start, min(end, x2) - x).render(console))
            if y != last_y:
                append("\n")
        return "".join(sequences)


def _one_cell_each(strip: Strip) -> bool:
    """Whether every character of the strip takes one cell (so a crop at any cell cuts between characters)."""
    text = strip.text
    return len(text) == strip.cell_length and cell_len(text) == len(text)


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
