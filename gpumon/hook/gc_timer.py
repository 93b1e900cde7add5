"""Python's garbage collector in the job: its passes' time, count and yield, cumulative, from `gc.callbacks`.

A collection in any thread counts: it holds the GIL, so the training thread stands still meanwhile. Collections never
overlap (CPython runs one at a time), so one start time is enough. Each pass costs the callback two calls and a few
additions; nothing is allocated beyond the clock's floats. A pass of generation 1 or 2 (the long ones) also asks,
through `stream_idle` (never waiting, never during a CUDA graph capture), whether the training stream had run dry
when it began: then the GPU idles for the whole pass, whatever GPU-Util says (`idle_seconds`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any


class GcTimer:
    """Cumulative garbage-collector figures since `start()`; `stop()` takes the callback off."""

    def __init__(
        self, clock: Callable[[], float] = time.perf_counter, stream_idle: Callable[[], bool | None] | None = None
    ) -> None:
        self._clock = clock
        self.stream_idle = stream_idle
        """Whether the training stream has nothing queued now (None: unknown); set once the sampler exists."""
        self._started_at = 0.0
        self._idle_pass = False
        self.idle_seconds = 0.0
        """Time inside passes that began with the training stream idle."""
        self.seconds = 0.0
        """Time inside collections."""
        self.passes = 0
        self.gen2_passes = 0
        """Full collections (generation 2): the ones that walk every tracked object."""
        self.collected = 0
        """Objects the collections found unreachable."""
        self._callback: Callable[[str, dict[str, Any]], None] | None = None

    def start(self) -> None:
        """Put the callback on gc.callbacks (once)."""
        if self._callback is not None:
            return
        self._callback = self._on_gc
        gc.callbacks.append(self._callback)

    def stop(self) -> None:
        """Take the callback off gc.callbacks."""
        callback = self._callback
        self._callback = None
        if callback is not None and callback in gc.callbacks:
            gc.callbacks.remove(callback)

    @property
    def running(self) -> bool:
        """Whether the callback is on."""
        return self._callback is not None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        try:
            if phase == "start":
                probe = self.stream_idle
                self._idle_pass = bool(info["generation"] and probe is not None and probe())
                self._started_at = self._clock()
                return
            started = self._started_at
            if started:
                seconds = self._clock() - started
                self.seconds += seconds
                if self._idle_pass:
                    self.idle_seconds += seconds
                self._started_at = 0.0
            self.passes += 1
            if info["generation"] == 2:
                self.gen2_passes += 1
            self.collected += info["collected"]
        except Exception:  # noqa: BLE001 - an exception here would be printed by the collector, in the job
            pass
