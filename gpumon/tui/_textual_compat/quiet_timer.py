"""A Textual workaround: a screen update timer that sleeps between frames (checked on the Textual versions in CHECKED).

What it replaces, and why: a Screen repaints from its update timer, a `set_interval(1 / MAX_FPS)` Timer that is
resumed when something needs drawing and pauses itself in each tick. After a tick, `Timer._run` still sleeps out the
rest of its period and wakes once more, only to find itself paused and wait again: one extra event-loop wake per
frame, which costs about as much CPU as a wake that draws something small (on the GPU machines' virtual machines,
a wake of Textual's loop is a few hundred microseconds). `FrameTimer` waits for its resume first and then sleeps only
what the frame-rate limit asks (at most one tick per interval), so a frame costs the one wake that brought its
snapshot.

It overrides `Timer._run` and uses its `_active`, `_reset` and `_tick`, and replaces the private
`Screen._update_timer` property, so it is used only with the Textual version it was written against: `update_timer`
hands back the timer Textual itself would make with any other. tests/tui/test_textual_compat.py checks it is off
outside CHECKED; tests/tui/test_textual_quiet_timer.py checks the frame-rate limit,
the pause and the wakes.
"""

from __future__ import annotations

from asyncio import Event
from collections.abc import Callable
from typing import cast

from textual import _time
from textual._time import sleep
from textual.message_pump import MessagePump
from textual.timer import EventTargetGone, Timer


class FrameTimer(Timer):
    """A repeating Timer that, while paused, waits without waking, and ticks at most once per interval."""

    async def _run(self) -> None:
        active = cast(Event, self._active)  # Textual's own cached_property types it as Never
        last_tick = _time.get_time() - self._interval
        count = 0
        while True:
            await active.wait()
            wait = last_tick + self._interval - _time.get_time()
            if wait > 0:
                await sleep(wait)
                await active.wait()
            self._reset = False
            last_tick = _time.get_time()
            count += 1
            try:
                await self._tick(next_timer=last_tick, count=count)
            except EventTargetGone:
                break


def update_timer(owner: MessagePump, interval: float, callback: Callable[[], None], name: str) -> Timer:
    """A paused repeating timer for `owner`'s repaints, as `MessagePump.set_interval(..., pause=True)` makes one, but a
    FrameTimer."""
    timer = FrameTimer(owner, interval, name=name, callback=callback, pause=True)
    timer._start()
    owner._timers.add(timer)
    return timer
