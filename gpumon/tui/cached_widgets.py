"""The screen and containers of the dashboard, drawn from their cached lines when none changed
(gpumon.tui._textual_compat: cached_lines); the same widgets as Textual's otherwise. The screen also repaints from
a timer that sleeps between frames (gpumon.tui._textual_compat: update_timer) and sends only the cells that changed
(send_changed_cells_only)."""

from __future__ import annotations

from textual.containers import Container, Vertical
from textual.geometry import Region
from textual.screen import UPDATE_PERIOD, Screen
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from gpumon.tui._textual_compat import cached_lines, send_changed_cells_only, update_timer


class CachedLines(Widget):
    """A widget drawn from its cached lines when none changed. Listed after the Textual class it joins (Textual takes
    a class's CSS from the first DOMNode among its bases), before Widget in the method order."""

    def render_lines(self, crop: Region) -> list[Strip]:
        strips = cached_lines(self, crop)
        return strips if strips is not None else super().render_lines(crop)


class CachedScreen(Screen[object], CachedLines):
    """The app's default screen; its frames send only the cells that changed."""

    _frame_timer: Timer | None = None

    def __init__(self, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name, id, classes)
        send_changed_cells_only(self)

    @property
    def _update_timer(self) -> Timer:
        if self._frame_timer is None:
            self._frame_timer = update_timer(self, UPDATE_PERIOD, self._on_timer_update, "screen_update")
        return self._frame_timer


class CachedContainer(Container, CachedLines):
    pass


class CachedVertical(Vertical, CachedLines):
    pass
