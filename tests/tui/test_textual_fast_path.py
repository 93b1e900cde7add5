"""The Textual fast path (gpumon.tui._textual_fast_path) is bound to one Textual version and draws what Textual does."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import tomllib
from conftest import REPOSITORY
from textual.geometry import Region
from textual.widget import Widget
from tui_support import FakeSource, frozen_clock

from gpumon.tui import _textual_fast_path
from gpumon.tui.app import GpumonApp
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.pane import LinesWidget


def test_installed_textual_is_the_one_the_fast_path_was_written_for() -> None:
    installed = version("textual")
    assert installed == _textual_fast_path.TARGET_TEXTUAL, (
        f"Textual {installed} is installed but gpumon/tui/_textual_fast_path.py copies Textual "
        f"{_textual_fast_path.TARGET_TEXTUAL}'s rendering: check it against the new StylesCache and "
        "Widget.render_lines, then update TARGET_TEXTUAL (the fast path is off until then)"
    )
    assert _textual_fast_path.ACTIVE


def test_pyproject_pins_the_textual_the_fast_path_targets() -> None:
    with open(REPOSITORY / "pyproject.toml", "rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    assert f"textual=={_textual_fast_path.TARGET_TEXTUAL}" in dependencies


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_panes_draw_exactly_what_textuals_styles_cache_draws(recording, size) -> None:
    """LinesWidget.render_lines skips Textual's per-line styling for plain boxes; the lines must not change."""
    source = FakeSource(description="replay of test", interval=0.5)
    app = GpumonApp(source, clock=frozen_clock(recording))
    async with app.run_test(size=size) as pilot:
        for shown in recording[:4]:
            source.push(shown)
            await pilot.pause()
        plain = [pane for pane in app.query(LinesWidget) if pane.plain_box()]
        assert {GpuPane, CpuPane, DiskPane} <= {type(pane) for pane in plain}
        for pane in app.query(LinesWidget):
            whole = Region(0, 0, pane.region.width, pane.region.height)
            drawn = [list(strip) for strip in pane.render_lines(whole)]
            pane._styles_cache.clear()
            expected = [list(strip) for strip in Widget.render_lines(pane, whole)]
            assert drawn == expected, type(pane).__name__
