"""The key bar: the keys of the screen's shown bindings, drawn cell for cell as Textual's Footer draws them,
following the bindings as they change; a click runs a key, a disabled one rings the bell; the palette's key keeps
the right edge."""

from __future__ import annotations

from typing import ClassVar

import pytest
from rich.style import Style
from screen_text import screen_rows
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Footer, Static
from tui_support import FakeSource

from gpumon.tui.app import GpumonApp
from gpumon.tui.key_bar import DrawnKey, KeyBar


class KeysApp(App[None]):
    """Keys of every kind: one disabled, two not shown (no description; show=False), one of an action already
    shown, one with a description of double-width characters."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Leave"),
        Binding("x", "count", "Count", tooltip="Count one"),
        Binding("plus", "count", "Count too", key_display="+"),  # the same action: not drawn again
        Binding("d", "disabled", "Disabled", tooltip="Never runs"),
        Binding("n", "count_quietly", ""),
        Binding("h", "hidden", "Hidden", show=False),
        Binding("w", "wide", "全角"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    def __init__(self, bar: Widget) -> None:
        super().__init__()
        self.bar = bar
        self.counted: list[str] = []
        self.bells = 0

    def compose(self) -> ComposeResult:
        yield Static("body")
        yield self.bar

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "disabled" else True

    def action_count(self) -> None:
        self.counted.append("count")

    def action_disabled(self) -> None:
        self.counted.append("disabled")

    def bell(self) -> None:
        self.bells += 1


def shown_bindings(app: App[object]) -> list[str]:
    """The keys Footer shows: the first shown binding of each action."""
    firsts: dict[str, str] = {}
    for _, binding, _, _ in app.screen.active_bindings.values():
        if binding.show:
            firsts.setdefault(binding.action, binding.key)
    return list(firsts.values())


def drawn(bar: KeyBar, key: str) -> DrawnKey:
    return next(drawn for drawn in bar.drawn if drawn.key.key == key)


def bottom_cells(app: App[object]) -> list[tuple[str, str]]:
    """The bottom row as the compositor draws it, cell by cell: the character and its style (less the meta that
    Textual's own widgets add for text selection)."""
    strip = app.screen._compositor.render_strips()[-1]
    return [
        (character, str((segment.style or Style()).clear_meta_and_links()))
        for segment in strip
        for character in segment.text
    ]


@pytest.mark.parametrize("theme", ["textual-dark", "nord", "solarized-light"])
@pytest.mark.parametrize("width", [100, 40, 16])
@pytest.mark.parametrize("hover", [None, 1, -3])
async def test_the_bar_draws_what_textuals_footer_draws(theme: str, width: int, hover: int | None) -> None:
    """The same cells and styles, keys cut at the palette's key where the bar is narrow, a hovered key lit."""
    rows = []
    for bar in (Footer(), KeyBar()):
        app = KeysApp(bar)
        async with app.run_test(size=(width, 3)) as pilot:
            app.theme = theme
            await pilot.pause()
            if hover is not None:
                await pilot.hover(offset=(hover % width, 2))
            await pilot.pause()
            rows.append(bottom_cells(app))
    footer, key_bar = rows
    assert key_bar == footer
    assert "".join(character for character, _ in key_bar).endswith("▏^p palette ")


async def test_the_bar_shows_the_shown_bindings_and_follows_them() -> None:
    """The dashboard's keys, in binding order; when the filter line opens, its Esc appears and the keys it would take
    as text go, as in Footer."""
    app = GpumonApp(FakeSource())
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        assert [key.key.key for key in bar.drawn[:-1]] == shown_bindings(app)
        assert {"q", "p", "s", "question_mark"} <= {key.key.key for key in bar.drawn}
        assert "escape" not in {key.key.key for key in bar.drawn}
        await pilot.press("slash")
        await pilot.pause()
        keys = [key.key.key for key in bar.drawn[:-1]]
        assert keys == shown_bindings(app)
        assert "escape" in keys and "q" not in keys
        clear = drawn(bar, "escape")
        assert screen_rows(app)[-1][clear.start : clear.end] == " esc Clear filter "
        await pilot.press("escape")
        await pilot.pause()
        assert "escape" not in {key.key.key for key in bar.drawn}


async def test_a_click_runs_the_key_and_a_disabled_key_is_dim_and_rings_the_bell() -> None:
    app = KeysApp(KeyBar())
    async with app.run_test(size=(100, 3)) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        count, disabled = drawn(bar, "x"), drawn(bar, "d")
        assert [key.key.key for key in bar.drawn] == ["q", "x", "d", "w", "question_mark", "ctrl+p"]
        await pilot.click(KeyBar, offset=(count.end - 1, 0))
        assert app.counted == ["count"] and app.bells == 0
        await pilot.click(KeyBar, offset=(disabled.start, 0))
        assert app.counted == ["count"] and app.bells == 1
        between = drawn(bar, "question_mark").end
        await pilot.click(KeyBar, offset=(between, 0))  # the empty space before the palette's key
        assert app.counted == ["count"] and app.bells == 1
        line = list(bar.render_line(0))
        dim = [bool(segment.style and segment.style.dim) for segment in line for _ in segment.text]
        assert all(dim[disabled.start : disabled.end]) and not any(dim[count.start : count.end])


async def test_hovering_a_key_shows_its_tooltip() -> None:
    app = KeysApp(KeyBar())
    async with app.run_test(size=(100, 3), tooltips=True) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        await pilot.hover(KeyBar, offset=(drawn(bar, "x").start + 1, 0))
        assert bar.tooltip == "Count one"
        await pilot.hover(KeyBar, offset=(drawn(bar, "d").start, 0))
        assert bar.tooltip == "Never runs"
        await pilot.hover(KeyBar, offset=(drawn(bar, "question_mark").end, 0))
        assert bar.tooltip is None
        await pilot.hover(KeyBar, offset=(99, 0))
        assert bar.tooltip == "Open the command palette"


@pytest.mark.parametrize("width", [80, 40])
async def test_the_palettes_key_keeps_the_right_edge_of_a_narrow_dashboard(width: int) -> None:
    app = GpumonApp(FakeSource())
    async with app.run_test(size=(width, 24)) as pilot:
        await pilot.pause()
        bar = app.query_one(KeyBar)
        palette = bar.drawn[-1]
        assert palette.key.key == "ctrl+p" and palette.end == width
        assert screen_rows(app)[-1].endswith("▏^p palette ")
        assert all(key.end <= palette.start for key in bar.drawn[:-1])
        if width == 40:
            assert len(bar.drawn) - 1 < len(shown_bindings(app))  # the keys past the palette's key are cut
