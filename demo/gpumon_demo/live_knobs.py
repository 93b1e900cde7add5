"""Knobs gpumon changes while the trainer runs.

DataLoader settings changed live by gpumon's hook (set_knob) take effect at the loader's next iter():
LiveLoaderSettings tells the trainer when its hook holds settings the loader does not have yet, so it starts its next
pass over the data now rather than at the end of an ImageNet-sized epoch. Without gpumon's hook it never asks.

The trainer's own knobs (batch size, autocast, ...) gpumon's trial runs ask for through files (ScriptKnobRequests):
a request {"seq": N, "knobs": {...}} at GPUMON_KNOBS_LIVE, answered at GPUMON_KNOBS_LIVE_ACK with {"live": [the knobs
it can change], "seq": N, "knobs": {their values now}} (and "error" when it refused request N)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .knobs import KNOBS_LIVE_ACK_ENV, KNOBS_LIVE_ENV, KnobError, validate_knobs

POLL_S = 0.1
"""How often the request file (a few hundred bytes) is read."""
MAX_REQUEST_BYTES = 65536


class LiveLoaderSettings:
    """Asks gpumon's hook (when it is in this process) for the DataLoader settings it will apply at the next iter()."""

    def __init__(self) -> None:
        lifecycle = sys.modules.get("gpumon.hook.lifecycle")
        self._runtime: Callable[[], Any] | None = getattr(lifecycle, "runtime", None)

    def pending(self, loader: Any) -> bool:
        """Whether the next iter(loader) would change one of its settings."""
        if self._runtime is None:
            return False
        try:
            runtime = self._runtime()
            if runtime is None or not runtime.active:
                return False  # an inactive hook applies nothing at iter()
            settings = dict(runtime.knobs.dataloader or {})
            # None (prefetch_factor) means the library's default, whatever the loader shows.
            return any(value is not None and getattr(loader, name, value) != value for name, value in settings.items())
        except Exception:  # noqa: BLE001 - a hook of another version must not stop the training
            return False

    def applied(self, loader: Any) -> None:
        """Called after a new iter(loader): if its settings still differ, the hook cannot apply them, so stop
        asking (a new pass every step would cost far more than a change that waits for the next epoch)."""
        if self.pending(loader):
            self._runtime = None


class ScriptKnobRequests:
    """gpumon's requests to change the trainer's own knobs while it runs, and the trainer's replies."""

    def __init__(self, request: str, reply: str, names: Sequence[str], clock: Callable[[], float] = time.monotonic):
        self.request_path = request
        self.reply_path = reply
        self.names = tuple(names)
        self.clock = clock
        self.seq = 0
        self._next_poll = 0.0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], names: Sequence[str]) -> ScriptKnobRequests | None:
        """The channel a trial run gave (None outside one)."""
        request, reply = environ.get(KNOBS_LIVE_ENV), environ.get(KNOBS_LIVE_ACK_ENV)
        return cls(request, reply, names) if request and reply else None

    def poll(self) -> tuple[int, dict[str, Any]] | None:
        """(seq, the knobs asked for) when a new request came since the last poll; at most every POLL_S seconds."""
        now = self.clock()
        if now < self._next_poll:
            return None
        self._next_poll = now + POLL_S
        try:
            with open(self.request_path, "rb") as stream:
                data = json.loads(stream.read(MAX_REQUEST_BYTES))
        except (OSError, ValueError):
            return None
        seq = data.get("seq") if isinstance(data, dict) else None
        knobs = data.get("knobs") if isinstance(data, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= self.seq or not isinstance(knobs, dict):
            return None
        self.seq = seq
        return seq, knobs

    def check(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """The request's knobs, validated (KnobError for a bad value or one it cannot change while running)."""
        outside = sorted(name for name in knobs if name not in self.names)
        if outside:
            raise KnobError(f"cannot change {', '.join(outside)} while running (only {', '.join(self.names)})")
        return validate_knobs(knobs)

    def answer(self, values: Mapping[str, Any], error: str = "") -> None:
        """Reply to the last request (seq 0: the announcement at start) with the knobs' values now."""
        reply: dict[str, Any] = {"live": list(self.names), "seq": self.seq, "knobs": dict(values)}
        if error:
            reply["error"] = error
        temporary = self.reply_path + ".tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as stream:
                json.dump(reply, stream)
            os.replace(temporary, self.reply_path)
        except OSError:
            pass  # gpumon then sees no answer and measures the change in a trial run of its own
