"""The one-line title bar: host, the snapshot's time and PAUSED on the left, the source and interval on the right."""

from __future__ import annotations

from rich.text import Text

from gpumon.tui.pane import LinesWidget


def title_line(title: str, sub_title: str, width: int) -> Text:
    """Title left, subtitle right-aligned, all bold, a blank cell either side; the subtitle is cut first when the
    width is short."""
    inner = width - 2 * PADDING
    text = Text(title, no_wrap=True, overflow="ellipsis", end="")
    text.truncate(max(0, inner), overflow="ellipsis")
    room = inner - text.cell_len - 2
    if room > 3:
        right = Text(sub_title, no_wrap=True, overflow="ellipsis", end="")
        right.truncate(room, overflow="ellipsis")
        text.append(" " * (inner - text.cell_len - right.cell_len))
        text.append_text(right)
    text.stylize("bold")  # a span, not the base style, which the Line API does not draw
    return Text.assemble(" " * PADDING, text, " " * PADDING, no_wrap=True, end="")


PADDING = 1
"""Blank cells either side, drawn in the line (CSS padding would take the bar off the panes' fast path)."""


class TitleBar(LinesWidget):
    """Replaces Textual's Header, whose every title change costs a layout pass of the whole screen.

    A Pane (Line API) rather than a Static, which would re-parse its text into Textual Content on every change.
    """

    DEFAULT_CSS = """
    TitleBar {
        dock: top;
        height: 1;
        background: $panel;
        color: $foreground;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = ""
        self._sub_title = ""

    @property
    def title(self) -> str:
        """Left: host, snapshot time, PAUSED."""
        return self._title

    @property
    def sub_title(self) -> str:
        """Right: the source's description and interval."""
        return self._sub_title

    def show(self, title: str, sub_title: str) -> None:
        if (title, sub_title) == (self._title, self._sub_title):
            return
        self._title, self._sub_title = title, sub_title
        self.show_lines(lambda width: [title_line(title, sub_title, width)])
