"""The one-line title bar: host, the snapshot's time and PAUSED on the left, the source and interval on the right."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def title_line(title: str, sub_title: str, width: int) -> Text:
    """Title left, subtitle right-aligned; the subtitle is cut first when the width is short."""
    text = Text(title, style="bold", no_wrap=True, overflow="ellipsis", end="")
    room = width - text.cell_len - 2
    if room > 3:
        right = Text(sub_title, no_wrap=True, overflow="ellipsis", end="")
        right.truncate(room, overflow="ellipsis")
        text.append(" " * (width - text.cell_len - right.cell_len))
        text.append_text(right)
    return text


class TitleBar(Static):
    """Replaces Textual's Header, whose every title change costs a layout pass of the whole screen."""

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
        super().__init__("", id=id)
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
        self.update(self._line(), layout=False)

    def on_resize(self) -> None:
        self.update(self._line(), layout=False)

    def _line(self) -> Text:
        return title_line(self._title, self._sub_title, self.size.width)
