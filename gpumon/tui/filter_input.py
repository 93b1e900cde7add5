"""The process filter line (`/`): filters the process table as you type; Enter keeps it, Esc clears it."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.binding import Binding, BindingType
from textual.widgets import Input

from gpumon.tui.process_table import ProcessTable

MAX_FILTER_LENGTH = 200


class FilterInput(Input):
    """Hidden until `/`; each change filters the table at once (btop-like)."""

    DEFAULT_CSS = """
    FilterInput.-textual-compact {
        padding: 0 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "clear", "Clear filter", id="filter.clear", tooltip="Clear the filter and close it"),
    ]

    def __init__(self, table: ProcessTable, *, id: str | None = None) -> None:
        super().__init__(
            placeholder="filter: command line, user or pid (Enter keeps, Esc clears)",
            max_length=MAX_FILTER_LENGTH,
            id=id,
            compact=True,  # one line and no border, focused too (a focus border would hide the text)
        )
        self.table = table
        table.filter_line = self
        self._close()

    def open(self) -> None:
        """Show the line and focus it now (not after the queued keys, as focus() would: they are its first
        characters)."""
        self.display = self.can_focus = True
        self.screen.set_focus(self)

    def _close(self) -> None:
        # Not focusable while hidden: the screen's auto focus would pick it before the table.
        self.display = self.can_focus = False

    def action_clear(self) -> None:
        self.value = ""
        self.table.set_filter("")
        self._close()
        self.screen.set_focus(self.table)

    @on(Input.Changed)
    def _filter(self, event: Input.Changed) -> None:
        event.stop()
        self.table.set_filter(event.value)

    @on(Input.Submitted)
    def _keep(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value:
            self._close()
        self.screen.set_focus(self.table)
