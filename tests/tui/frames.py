"""Test helpers that drive the dashboard's frames by conditions, not by timing: a snapshot pushed and waited for until
the app has applied it and the screen has drawn everything it leads to."""

from __future__ import annotations

from textual.pilot import Pilot
from tui_support import FakeSource

from gpumon.sampling.snapshot import Snapshot
from gpumon.tui.app import GpumonApp

SETTLE_ROUNDS = 100
"""A screen still drawing after this many rounds of events and frames is a bug, not a slow machine."""


def _screen_clean(app: GpumonApp) -> bool:
    """Nothing left for the screen to lay out, repaint or send (Textual's own flags: tests may read them)."""
    screen = app.screen
    return not (
        screen._layout_required
        or screen._scroll_required
        or screen._repaint_required
        or screen._dirty_widgets
        or screen._compositor._dirty_regions
    )


async def settle(pilot: Pilot[None], frames_drawn: list[object] | None = None) -> None:
    """Wait until the screen has handled every event and drawn every frame they lead to: a frame may post more (a
    widget resized by the layout gets a Resize event and redraws), so rounds of (events, a frame) are repeated until
    one draws nothing and leaves nothing to draw. `frames_drawn`: a list each drawn frame is added to, where the test
    counts them (without it, Textual's own update counter on the screen's compositor is not public: one round more)."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    quiet_rounds = 0
    for _ in range(SETTLE_ROUNDS):
        before = len(frames_drawn) if frames_drawn is not None else None
        await pilot.wait_for_scheduled_animations()
        drew = frames_drawn is not None and len(frames_drawn) != before
        quiet_rounds = 0 if drew or not _screen_clean(app) else quiet_rounds + 1
        if quiet_rounds >= (1 if frames_drawn is not None else 2):
            return
    raise AssertionError(f"the screen was still drawing after {SETTLE_ROUNDS} rounds")


async def show(
    pilot: Pilot[None], source: FakeSource, snapshot: Snapshot, frames_drawn: list[object] | None = None
) -> None:
    """Push `snapshot`, wait until the app has applied it (it is the one on screen), then until the screen settles."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    source.push(snapshot)
    for _ in range(SETTLE_ROUNDS):
        shown = app.snapshot
        if shown is not None and shown.timestamp == snapshot.timestamp:
            break
        await pilot.pause()
    else:
        raise AssertionError(f"the snapshot at {snapshot.timestamp} was never applied")
    await settle(pilot, frames_drawn)
