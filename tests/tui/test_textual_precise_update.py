"""The dashboard's frames send only the changed cells (gpumon.tui._textual_compat.precise_update), and a terminal
emulator (pyte) shows every frame of a 2-GPU recording exactly as it shows Textual's own frames, and as the whole
screen redrawn at that moment: each cell's character, colours and attributes."""

from __future__ import annotations

import io

import pyte
import pytest
from frames import settle, show
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget
from tui_support import FakeSource, frozen_clock

from gpumon.sampling.snapshot import Snapshot
from gpumon.tui import _textual_compat
from gpumon.tui.app import GpumonApp

if not _textual_compat.ACTIVE:
    pytest.skip("the private workarounds are off on this Textual version", allow_module_level=True)

from textual._compositor import ChopsUpdate, Compositor

from gpumon.tui._textual_compat.precise_update import PreciseChopsUpdate, PreciseCompositor

WIDTH, HEIGHT = 160, 50


class Terminal:
    """A pyte screen fed frames; `cells()` is what it shows."""

    def __init__(self) -> None:
        self.screen = pyte.Screen(WIDTH, HEIGHT)
        self.stream = pyte.Stream(self.screen)

    def feed(self, data: str) -> None:
        self.stream.feed(data)

    def cells(self) -> list[list[tuple[object, ...]]]:
        buffer = self.screen.buffer
        return [[_look(buffer[row][column]) for column in range(WIDTH)] for row in range(HEIGHT)]


def _look(cell: pyte.screens.Char) -> tuple[object, ...]:
    """What a cell shows: its character, colours and attributes; of a blank, only what a blank shows (its background,
    reverse, a line through or under it: gpumon.tui.pane's blank-cell rule)."""
    if cell.data == " " and not (cell.reverse or cell.underscore or cell.strikethrough):
        return (" ", cell.bg)
    return (cell.data, cell.fg, cell.bg, cell.bold, cell.italics, cell.underscore, cell.strikethrough, cell.reverse)


async def frames_of(snapshots: list[Snapshot], interval: float) -> tuple[str, list[tuple[str, str, str]]]:
    """The whole screen once the dashboard has started, then each frame it rendered while showing `snapshots` one by
    one, each pushed once the last has been applied and every frame it led to drawn: (as Textual renders it, as
    gpumon's screen does, the whole screen redrawn at that moment). A full frame (after a layout) is the same in all
    three."""
    source = FakeSource(interval=interval)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    frames: list[tuple[str, str, str]] = []
    async with app.run_test(size=(WIDTH, HEIGHT)) as pilot:
        await settle(pilot)
        compositor = app.screen._compositor
        assert isinstance(compositor, PreciseCompositor)
        # Where the comparison starts: Textual's start-up frames, drawn before this, are not compared.
        start = compositor.render_full_update().render_segments(app.console)
        render_update = compositor.render_update

        def captured(*args: object, **kwargs: object) -> object:
            update = render_update(*args, **kwargs)  # type: ignore[arg-type]
            if update is not None:
                console = app.console
                whole = compositor.render_full_update().render_segments(console)
                if isinstance(update, PreciseChopsUpdate):
                    textuals = ChopsUpdate.render_segments(update, console)
                    frames.append((textuals, update.render_segments(console), whole))
                else:
                    frames.append((whole, whole, whole))
            return update

        compositor.render_update = captured  # type: ignore[method-assign]
        for snapshot in snapshots:
            await show(pilot, source, snapshot, frames)
    return start, frames


@pytest.mark.parametrize("interval", [1.0, 0.25])
async def test_every_frame_shows_what_textuals_frame_shows_with_fewer_bytes(two_gpu_recording, interval) -> None:
    start, frames = await frames_of(two_gpu_recording, interval)
    partial = [frame for frame in frames if frame[0] != frame[1]]
    assert len(partial) > len(two_gpu_recording) // 2, "most frames must be cut for the test to mean anything"
    textuals, gpumons, redrawn = Terminal(), Terminal(), Terminal()
    for terminal in (textuals, gpumons, redrawn):
        terminal.feed(start)
    for index, (textual_frame, gpumon_frame, whole) in enumerate(frames):
        textuals.feed(textual_frame)
        gpumons.feed(gpumon_frame)
        redrawn.feed(whole)
        assert gpumons.cells() == textuals.cells() == redrawn.cells(), f"frame {index}"
        assert len(gpumon_frame) <= len(textual_frame), f"frame {index}"
    sent = sum(len(gpumon.encode()) for _, gpumon, _ in frames)
    assert sent < 0.9 * sum(len(textual.encode()) for textual, _, _ in frames)


def test_a_line_with_wide_characters_is_sent_from_its_widgets_left_edge() -> None:
    """A crop inside a strip holding a two-cell character starts at the chop's left edge, as Textual's does."""
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=40)
    narrow = Strip([Segment("abcdefghij", Style(color="red"))], 10)
    wide = Strip([Segment("名前abcdef", Style(color="red"))], 10)
    for strip, expected_start in ((narrow, "\x1b[1;7H"), (wide, "\x1b[1;1H")):
        update = PreciseChopsUpdate([{0: strip}], [(0, 6, 8)], [[10]])
        sent = update.render_segments(console)
        assert sent.startswith(expected_start), sent
        textual, gpumon = Terminal(), Terminal()
        textual.feed(ChopsUpdate([{0: strip}], [(0, 0, 10)], [[10]]).render_segments(console))
        gpumon.feed(ChopsUpdate([{0: strip}], [(0, 0, 10)], [[10]]).render_segments(console))
        textual.feed(ChopsUpdate([{0: strip}], [(0, 6, 8)], [[10]]).render_segments(console))
        gpumon.feed(sent)
        assert gpumon.cells() == textual.cells()


@pytest.mark.parametrize("interval", [1.0, 0.25])
async def test_each_piece_sent_is_the_piece_textuals_partial_update_draws(two_gpu_recording, interval) -> None:
    """PreciseCompositor asks only the front widgets for the lines it sends; every piece of a line it sends is the
    Strip Textual's own partial update puts there, and it asks the widgets for fewer lines in all."""
    source = FakeSource(interval=interval)
    app = GpumonApp(source, clock=frozen_clock(two_gpu_recording))
    pieces = 0
    asked: dict[str, list[int]] = {"gpumon": [], "textual": []}
    async with app.run_test(size=(WIDTH, HEIGHT)) as pilot:
        compositor = app.screen._compositor
        assert isinstance(compositor, PreciseCompositor)
        precise_update = compositor.render_partial_update
        asking = ["gpumon"]

        def counted(widget: Widget) -> None:
            render_lines = widget.render_lines

            def render_lines_counted(crop: Region) -> list[Strip]:
                asked[asking[0]].append(crop.height)
                return render_lines(crop)

            widget.render_lines = render_lines_counted  # type: ignore[method-assign]

        def compared() -> ChopsUpdate | None:
            nonlocal pieces
            dirty = set(compositor._dirty_regions)
            asking[0] = "gpumon"
            ours = precise_update()
            compositor._dirty_regions.update(dirty)
            asking[0] = "textual"
            textuals = Compositor.render_partial_update(compositor)
            if ours is None:
                assert textuals is None
                return None
            assert textuals is not None
            assert ours.spans == textuals.spans
            for line, x1, x2 in ours.spans:
                for end, (x, strip) in zip(ours.chop_ends[line], ours.chops[line].items(), strict=False):
                    if x < x2 and end > x1:
                        expected = textuals.chops[line][x]
                        assert strip is not None and expected is not None, (line, x)
                        assert list(strip) == list(expected), (line, x)
                        pieces += 1
            return ours

        for widget in app.screen.walk_children(with_self=True):
            counted(widget)
        compositor.render_partial_update = compared  # type: ignore[method-assign]
        for snapshot in two_gpu_recording:
            source.push(snapshot)
            await pilot.pause()
        await pilot.pause(0.05)
    assert pieces > 10 * len(two_gpu_recording)
    assert 0 < sum(asked["gpumon"]) < 0.7 * sum(asked["textual"])
