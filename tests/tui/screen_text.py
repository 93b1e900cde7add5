"""The dashboard's screen as plain text rows, as the terminal would show it, and which of them are blank."""

from __future__ import annotations

import io

from rich.console import Console
from textual.app import App

BORDER_ONLY = frozenset(" ─")
"""A row of nothing but these (once the side column's divider is left out) is blank."""


def screen_rows(app: App[object]) -> list[str]:
    """Every row of the screen (the composited frame, as App.export_screenshot draws it) as text."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    rows = console.export_text().splitlines()
    return [row.ljust(width) for row in rows[:height]]


def blank_rows(rows: list[str], divider_x: int | None) -> list[int]:
    """The rows that show nothing: full-width rows of only spaces and border lines, the cell of the side column's
    divider (`divider_x`, a '│' on every row it spans) left out. A graph's row with its axis is not blank."""
    blank = []
    for index, row in enumerate(rows):
        cells = row if divider_x is None else row[:divider_x] + row[divider_x + 1 :]
        if set(cells) <= BORDER_ONLY:
            blank.append(index)
    return blank
