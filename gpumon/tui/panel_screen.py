"""A modal screen of text in one scrolling, bordered panel (help, GPU health): its look and its close action."""

from __future__ import annotations

from textual.screen import ModalScreen


class PanelScreen(ModalScreen[None]):
    """A centred VerticalScroll panel over the dashboard; a subclass composes it and binds its keys to `close`."""

    DEFAULT_CSS = """
    PanelScreen {
        align: center middle;
    }
    PanelScreen > VerticalScroll {
        width: 100;
        max-width: 96%;
        height: auto;
        max-height: 90%;
        border: round $accent;
        background: $surface;
        padding: 0 1;
    }
    """

    def action_close(self) -> None:
        self.dismiss(None)
