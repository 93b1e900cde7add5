"""The screen, containers and footer of the dashboard, drawn from their cached lines when none changed
(gpumon.tui._textual_fast_path.cached_lines); the same widgets as Textual's otherwise."""

from __future__ import annotations

from textual.containers import Container, Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Footer

from gpumon.tui._textual_fast_path import cached_lines


class CachedScreen(Screen[object]):
    """The app's default screen."""

    def render_lines(self, crop: Region) -> list[Strip]:
        strips = cached_lines(self, crop)
        return strips if strips is not None else super().render_lines(crop)


class CachedContainer(Container):
    def render_lines(self, crop: Region) -> list[Strip]:
        strips = cached_lines(self, crop)
        return strips if strips is not None else super().render_lines(crop)


class CachedVertical(Vertical):
    def render_lines(self, crop: Region) -> list[Strip]:
        strips = cached_lines(self, crop)
        return strips if strips is not None else super().render_lines(crop)


class CachedFooter(Footer):
    def render_lines(self, crop: Region) -> list[Strip]:
        strips = cached_lines(self, crop)
        return strips if strips is not None else super().render_lines(crop)
