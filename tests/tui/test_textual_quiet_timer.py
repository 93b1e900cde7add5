"""The screen's update timer (gpumon.tui._textual_quiet_timer) ticks when resumed, at most once per interval, and
does not wake while paused: a frame costs one wake of the event loop, not two."""

from __future__ import annotations

import asyncio
import time

import pytest
from textual import timer as textual_timer
from textual.app import App
from tui_support import FakeSource

from gpumon.tui import _textual_compat

if not _textual_compat.ACTIVE:
    pytest.skip("the private workarounds are off with this Textual", allow_module_level=True)
from gpumon.tui._textual_compat import quiet_timer as _textual_quiet_timer
from gpumon.tui._textual_compat.quiet_timer import FrameTimer, update_timer
from gpumon.tui.app import GpumonApp


class _Ticks(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[float] = []

    def tick(self) -> None:
        self.ticks.append(time.monotonic())


def _counting_sleeps(monkeypatch, module: object, app: _Ticks) -> list[tuple[int, float]]:
    """Each sleep the timer loop in `module` takes from now on: (ticks before it, seconds)."""
    sleeps: list[tuple[int, float]] = []
    real_sleep = module.sleep  # type: ignore[attr-defined]  # the timer modules' own sleep

    async def counted(seconds: float) -> None:
        sleeps.append((len(app.ticks), seconds))
        await real_sleep(seconds)

    monkeypatch.setattr(module, "sleep", counted)
    return sleeps


async def test_a_paused_frame_timer_waits_without_waking_and_ticks_as_soon_as_resumed(monkeypatch) -> None:
    app = _Ticks()
    sleeps = _counting_sleeps(monkeypatch, _textual_quiet_timer, app)
    async with app.run_test() as pilot:
        timer = update_timer(app, 0.05, app.tick, "frames")
        assert isinstance(timer, FrameTimer)
        await pilot.pause(0.2)
        assert app.ticks == [], "created paused"
        for _ in range(3):
            timer.resume()
            resumed = time.monotonic()
            await asyncio.sleep(0.01)
            assert app.ticks and app.ticks[-1] >= resumed, "a resume long after the last tick ticks now"
            timer.pause()
            before = len(sleeps)
            await asyncio.sleep(0.2)
            assert len(sleeps) == before, "no sleep, so no wake, while paused"
        assert len(app.ticks) == 3


async def test_a_running_frame_timer_ticks_at_most_once_per_interval() -> None:
    app = _Ticks()
    async with app.run_test() as pilot:
        timer = update_timer(app, 0.05, app.tick, "frames")
        timer.resume()
        await pilot.pause(0.52)
        timer.pause()
        gaps = [later - earlier for earlier, later in zip(app.ticks, app.ticks[1:], strict=False)]
        assert 6 <= len(app.ticks) <= 12
        assert min(gaps) >= 0.045


async def test_textuals_own_timer_sleeps_again_after_a_tick_that_paused_it(monkeypatch) -> None:
    """The reason for the workaround, checked on the installed Textual: after a tick that pauses it, its Timer still
    sleeps out another period (and so wakes the loop once more) before it waits on its pause."""
    app = _Ticks()
    sleeps = _counting_sleeps(monkeypatch, textual_timer, app)
    async with app.run_test() as pilot:
        timer = app.set_interval(0.05, lambda: (app.tick(), timer.pause()), pause=True)
        await pilot.pause(0.1)
        timer.resume()
        await pilot.pause(0.3)
        assert len(app.ticks) == 1
        assert any(ticks_before == 1 for ticks_before, _ in sleeps), "Textual's timer slept after its paused tick"


async def test_the_dashboard_screen_repaints_from_a_frame_timer() -> None:
    source = FakeSource()
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen._update_timer, FrameTimer)
