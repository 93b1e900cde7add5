"""compact_sgr keeps what a terminal shows: every cell's character, colours and attributes on a real terminal emulator
(pyte) are the same from the compacted frame as from Rich's, for random styled frames and for the dashboard's own."""

from __future__ import annotations

import io

import pyte
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.segment import Segment
from rich.style import Style

from gpumon.tui.terminal_output import compact_sgr

WIDTH, HEIGHT = 60, 8
COLORS = ["red", "bright_green", "grey50", "color(200)", "#10a0ff", "default", None]


def screen_after(*writes: str) -> list[list[tuple[object, ...]]]:
    screen = pyte.Screen(WIDTH, HEIGHT)
    stream = pyte.Stream(screen)
    for data in writes:
        stream.feed(data)
    return [
        [
            (cell.data, cell.fg, cell.bg, cell.bold, cell.italics, cell.underscore, cell.strikethrough, cell.reverse)
            for cell in (screen.buffer[row][column] for column in range(WIDTH))
        ]
        for row in range(HEIGHT)
    ]


styles = st.builds(
    Style,
    color=st.sampled_from(COLORS),
    bgcolor=st.sampled_from(COLORS),
    bold=st.sampled_from([None, True, False]),
    dim=st.sampled_from([None, True]),
    italic=st.sampled_from([None, True]),
    underline=st.sampled_from([None, True]),
    reverse=st.sampled_from([None, True]),
    strike=st.sampled_from([None, True]),
)
runs = st.tuples(st.text(alphabet="ab ⣿⣀│─█", min_size=0, max_size=8), st.one_of(st.none(), styles), st.booleans())


def render(parts: list[tuple[str, Style | None, bool]]) -> str:
    """What Rich writes for these runs, with a cursor move before some (as Textual's frames have)."""
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=WIDTH)
    out = []
    for index, (text, style, move) in enumerate(parts):
        if move:
            out.append(f"\x1b[{index % HEIGHT + 1};{index * 7 % WIDTH + 1}H")
        out.append(console._render_buffer([Segment(text, style)]))
    return "".join(out)


@settings(max_examples=300, deadline=None)
@given(st.lists(runs, min_size=1, max_size=30), st.lists(runs, max_size=10))
def test_a_compacted_frame_shows_the_same_cells(first: list, second: list) -> None:  # type: ignore[type-arg]
    frame, next_frame = render(first), render(second)
    assert screen_after(compact_sgr(frame), compact_sgr(next_frame)) == screen_after(frame, next_frame)
    assert len(compact_sgr(frame)) <= len(frame)


def test_resets_between_runs_of_full_colours_go() -> None:
    frame = "\x1b[90;40m   │\x1b[0m\x1b[90;40m    \x1b[0m\x1b[92;40m⣿⣿\x1b[0m\n\x1b[2;1H\x1b[1;97;40mx\x1b[0m"
    compacted = compact_sgr(frame)
    # The first style is on top of one it does not know: kept, with the reset after it; from there, only changes.
    assert compacted == "\x1b[90;40m   │\x1b[0m\x1b[90;40m    \x1b[92m⣿⣿\n\x1b[2;1H\x1b[1;97mx\x1b[0m"
    assert screen_after(compacted) == screen_after(frame)


@pytest.mark.parametrize(
    "frame",
    [
        "plain text, no escapes",
        "\x1b[4:3mcurly underline\x1b[0m",  # a code the model does not know: passed on untouched
        "\x1b[53moverline\x1b[0m",
        "\x1b[1mbold on a style we never saw reset\x1b[0m",
    ],
)
def test_what_the_model_does_not_know_passes_unchanged(frame: str) -> None:
    assert screen_after(compact_sgr(frame)) == screen_after(frame)
    if "[53m" in frame or "4:3" in frame:
        assert compact_sgr(frame) == frame


async def test_the_dashboards_own_frames_show_the_same_and_shrink(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 2-GPU recording at 160x50, frame after frame, on a 160x50 pyte screen: the same cells, fewer bytes."""
    from conftest import REPOSITORY
    from textual._compositor import CompositorUpdate
    from textual.app import App
    from tui_support import FakeSource, frozen_clock

    from gpumon.sampling.recording import read_recording
    from gpumon.tui.app import GpumonApp

    frames: list[str] = []
    display = App._display

    def capture(self: App[object], screen: object, renderable: object) -> None:
        if isinstance(renderable, CompositorUpdate):
            frames.append(renderable.render_segments(self.console))
        display(self, screen, renderable)  # type: ignore[arg-type]

    monkeypatch.setattr(App, "_display", capture)
    snapshots = read_recording(REPOSITORY / "assets" / "recordings" / "h200x2-tests.jsonl")[:40]
    source = FakeSource(interval=1.0)
    app = GpumonApp(source, clock=frozen_clock(snapshots))
    async with app.run_test(size=(160, 50)) as pilot:
        for snapshot in snapshots:
            source.push(snapshot)
            await pilot.pause()
    assert len(frames) > 10
    raw, compacted = pyte.Screen(160, 50), pyte.Screen(160, 50)
    raw_stream, compacted_stream = pyte.Stream(raw), pyte.Stream(compacted)
    for frame in frames:
        raw_stream.feed(frame)
        compacted_stream.feed(compact_sgr(frame))
        assert compacted.display == raw.display
        assert all(
            raw.buffer[row][column] == compacted.buffer[row][column] for row in range(50) for column in range(160)
        )
    saved = 1 - sum(len(compact_sgr(frame).encode()) for frame in frames) / sum(len(frame.encode()) for frame in frames)
    assert saved > 0.15, saved
