"""The one-line title bar: host, the snapshot's time and PAUSED on the left, the source and interval on the right."""

from __future__ import annotations

from rich.text import Text

from gpumon.tui.pane import LinesWidget


def title_line(title: str, sub_title: str, width: int) -> Text:
    """Title left, subtitle right-aligned, all bold; the subtitle is cut first when the width is short."""
    text = Text(title, no_wrap=True, overflow="ellipsis", end="")
    room = width - text.cell_len - 2
    if room > 3:
        right = Text(sub_title, no_wrap=True, overflow="ellipsis", end="")
        right.truncate(room, overflow="ellipsis")
        text.append(" " * (width - text.cell_len - right.cell_len))
        text.append_text(right)
    text.stylize("bold")  # a span, not the base style, which the Line API does not draw
    return text


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
        padding: 0 1;
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
