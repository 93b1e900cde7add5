"""The hook's answers to client requests: each request checked, queued for the training thread where it needs it,
and answered with one reply (or a RequestError), never waiting for a step."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from gpumon import protocol
from gpumon.hook.profiler_capture import TRACES_DIR, trace_dir_problem, trace_path
from gpumon.hook.runtime import HookRuntime
from gpumon.hook.server_client import Client

MAX_QUEUED_CONTROL = 60
"""Requests waiting for the training thread's next step boundary, at most."""


class RequestError(Exception):
    """A request the hook refuses: an `error` reply with this code, the connection kept."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RequestHandler:
    """Answers the requests of every client of one server."""

    def __init__(self, runtime: HookRuntime, state: Callable[[], protocol.State], socket_dir: Callable[[], str]):
        self.runtime = runtime
        self._state = state
        self._socket_dir = socket_dir

    def answer(self, client: Client, msg: dict[str, Any]) -> dict[str, Any]:
        """The reply to a decoded request (its `id` added by the caller). Raises RequestError."""
        kind = msg["type"]
        if kind not in protocol.REQUEST_TYPES:
            raise RequestError(protocol.E_UNKNOWN_TYPE, f"unknown request type {kind!r:.80}")
        if kind == protocol.PING:
            return {"type": protocol.PONG, "t": round(time.time(), 4)}
        if kind == protocol.GET_STATE:
            return dict(self._state())
        if kind == protocol.SUBSCRIBE:
            return subscribe(client, msg, self.runtime.seq)
        if kind == protocol.DIAGNOSE:
            return self._diagnose(msg)
        if kind == protocol.PROFILE:
            return self._profile(msg)
        return self._set_knobs(msg)

    def _queue(self, action: str, argument: Any, msg: dict[str, Any], busy: str) -> None:
        if len(self.runtime.control) >= MAX_QUEUED_CONTROL:
            raise RequestError(protocol.E_BUSY, busy)
        self.runtime.control.append((action, argument, msg.get("id")))

    def _diagnose(self, msg: dict[str, Any]) -> dict[str, Any]:
        steps = msg["steps"]
        if not 1 <= steps <= protocol.DIAGNOSE_MAX_STEPS:
            raise RequestError(protocol.E_BAD_MESSAGE, f"steps must be 1..{protocol.DIAGNOSE_MAX_STEPS}")
        if self.runtime.diagnosing:
            raise RequestError(protocol.E_BUSY, "a diagnosis is already running")
        self._queue("diagnose", steps, msg, "a diagnosis is already running")
        return {"type": protocol.DIAGNOSING, "steps": steps}

    def _profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Queue a profiler capture for the training thread."""
        steps = msg["steps"]
        directory = os.path.normpath(msg.get("dir", os.path.join(self._socket_dir(), TRACES_DIR)))
        if not 1 <= steps <= protocol.PROFILE_MAX_STEPS:
            raise RequestError(protocol.E_BAD_MESSAGE, f"steps must be 1..{protocol.PROFILE_MAX_STEPS}")
        problem = trace_dir_problem(directory)
        if problem is not None:
            raise RequestError(protocol.E_BAD_MESSAGE, problem)
        busy = "a profiler capture is already running"
        if len(self.runtime.control) >= MAX_QUEUED_CONTROL or not self.runtime.profiler_capture.reserve():
            raise RequestError(protocol.E_BUSY, busy)
        path = trace_path(directory, os.getpid())
        self.runtime.control.append(("profile", (steps, path), msg.get("id")))
        return {"type": protocol.PROFILING, "steps": steps, "path": path}

    def _set_knobs(self, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            knobs = protocol.validate_knobs(msg["knobs"], live=True)
        except protocol.ProtocolError as exc:
            raise RequestError(exc.code, str(exc)) from None
        self._queue("knobs", knobs, msg, "too many requests waiting for a step")
        ack = {
            "type": protocol.KNOB_ACK,
            "knobs": knobs,
            "applies": {name: protocol.KNOBS[name]["applies"] for name in knobs},
        }
        not_live = self.runtime.not_live(knobs)
        if not_live:
            ack["not_live"] = not_live
        return ack


def subscribe(client: Client, msg: dict[str, Any], seq: int) -> dict[str, Any]:
    """Apply a `subscribe` request's options to `client` (clamped; a backlog moves its cursor back from `seq`, the
    newest step) and say what is in effect. A backlog that would send the client more records again than its replay
    budget has left is refused whole (`over_budget`), before anything changes."""
    now = time.monotonic()
    if "backlog" in msg:
        cursor = max(0, seq - min(protocol.BACKLOG_MAX, max(0, msg["backlog"])))
        if not client.replays.take(now, max(0, client.cursor - cursor)):
            wait = client.replays.wait_s(now, client.cursor - cursor)
            raise RequestError(protocol.E_OVER_BUDGET, f"backlog replay budget spent: ask again in {wait:.1f} s")
        client.cursor = cursor
        client.replay_until = seq
        client.next_steps = now
    if "steps" in msg:
        client.steps = msg["steps"]
    if "state" in msg:
        client.state = msg["state"]
    if "steps_interval" in msg:
        client.steps_interval = min(5.0, max(0.05, float(msg["steps_interval"])))
    if "state_interval" in msg:
        client.state_interval = min(30.0, max(0.25, float(msg["state_interval"])))
    client.next_steps = min(client.next_steps, now + client.steps_interval)
    client.next_state = min(client.next_state, now + client.state_interval)
    return {
        "type": protocol.SUBSCRIBED,
        "options": {
            "steps": client.steps,
            "state": client.state,
            "steps_interval": client.steps_interval,
            "state_interval": client.state_interval,
        },
    }
