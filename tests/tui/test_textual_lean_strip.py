"""The panes' Strips make their caches when first used (gpumon.tui._textual_compat.lean_strip), and read and behave as
Textual's own Strips do."""

from __future__ import annotations

import gc

import pytest
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.terminal_theme import DEFAULT_TERMINAL_THEME
from textual.cache import FIFOCache
from textual.color import Color
from textual.filter import ANSIToTruecolor
from textual.strip import Strip
from tui_support import FakeSource, frozen_clock

from gpumon.tui import _textual_compat

if not _textual_compat.ACTIVE:
    pytest.skip("the private workarounds are off with this Textual", allow_module_level=True)
from gpumon.tui._textual_compat.lean_strip import LeanStrip
from gpumon.tui.app import GpumonApp
from gpumon.tui.pane import LinesWidget

SEGMENTS = [
    Segment("Util    44% ", Style(color="green")),
    Segment("100┤", Style(color="bright_black")),
    Segment("⣿⣀ ·", Style(color="green", bgcolor="black")),
]


def test_every_slot_of_textuals_strip_reads_the_same_on_a_lean_strip() -> None:
    """A Textual whose Strip gains a cache (or changes one's size) fails here, not in a frame."""
    textuals, lean = Strip(SEGMENTS, 20), LeanStrip(SEGMENTS, 20)
    for name in Strip.__slots__:
        expected, got = getattr(textuals, name), getattr(lean, name)
        if isinstance(expected, FIFOCache):
            assert isinstance(got, FIFOCache) and (got._maxsize, len(got)) == (expected._maxsize, 0), name
        else:
            assert got == expected, name


def test_a_lean_strip_holds_no_cache_until_one_is_used() -> None:
    lean = LeanStrip(SEGMENTS, 20)
    assert not any(isinstance(referent, FIFOCache) for referent in gc.get_referents(lean))
    assert sum(isinstance(referent, FIFOCache) for referent in gc.get_referents(Strip(SEGMENTS, 20))) == 7
    lean.crop(2, 10)
    assert sum(isinstance(referent, FIFOCache) for referent in gc.get_referents(lean)) == 1


def test_a_lean_strip_crops_divides_pads_styles_filters_and_renders_as_textuals_strip_does() -> None:
    console = Console(force_terminal=True, color_system="truecolor", width=40)
    textuals, lean = Strip(SEGMENTS, 20), LeanStrip(SEGMENTS, 20)
    truecolor = ANSIToTruecolor(DEFAULT_TERMINAL_THEME)
    for _ in range(2):  # the second time from the caches
        for operation in (
            lambda strip: strip.crop(3, 14),
            lambda strip: strip.divide([5, 12, 20]),
            lambda strip: strip.adjust_cell_length(30, Style(bgcolor="red")),
            lambda strip: strip.adjust_cell_length(8),
            lambda strip: strip.apply_style(Style(bold=True)),
            lambda strip: strip.crop_extend(2, 25, Style(bgcolor="blue")),
            lambda strip: strip.apply_offsets(1, 2),
            lambda strip: strip.simplify(),
        ):
            assert operation(lean) == operation(textuals)
        assert lean.render(console) == textuals.render(console)
        assert lean == textuals and lean.cell_length == textuals.cell_length == 20
        assert lean.text == textuals.text and lean.link_ids == textuals.link_ids
        background = Color(10, 10, 10)
        assert lean.apply_filter(truecolor, background) == textuals.apply_filter(truecolor, background)


async def test_the_panes_draw_their_lines_as_lean_strips(two_gpu_recording) -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(two_gpu_recording))
    async with app.run_test(size=(160, 50)) as pilot:
        for snapshot in two_gpu_recording[:10]:
            source.push(snapshot)
            await pilot.pause()
        await pilot.pause(0.05)
        drawn = [
            strip
            for pane in app.query(LinesWidget)
            if pane._strips is not None
            for strip in pane._strips[3]
            if strip is not None
        ]
    assert len(drawn) > 40
    assert all(type(strip) is LeanStrip for strip in drawn)
