"""Knobs a trial's own script changes while it runs: gpumon writes the wanted values to a request file, the script
applies them at a step boundary and answers in a reply file (opt-in; the demo trainer does it).

The request (GPUMON_KNOBS_LIVE) is {"seq": N, "knobs": {...}}: every script knob gpumon has asked for so far, so a
rollback followed at once by the next change is never lost. The reply (GPUMON_KNOBS_LIVE_ACK) is {"live": [names
the script can change while it runs], "seq": the last request applied, "knobs": {their values now}, "error": why
request `seq` was refused, or absent}; the script writes it once at start (seq 0) and after each request.
Only trial runs (throwaway runs of the command) get these paths: a job the user runs and gpumon attaches to never
has a knob that changes its math changed live.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KNOBS_LIVE_ENV = "GPUMON_KNOBS_LIVE"
KNOBS_LIVE_ACK_ENV = "GPUMON_KNOBS_LIVE_ACK"
MAX_REPLY_BYTES = 65536


class ScriptRefused(Exception):
    """The script answered a request with an error (its one-line reason)."""


@dataclass(frozen=True, slots=True)
class Reply:
    live: frozenset[str] = frozenset()
    seq: int = 0
    knobs: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""


def read_reply(path: Path) -> Reply:
    """The script's last reply (an empty one when it has not answered, or answered nonsense)."""
    try:
        with path.open("rb") as stream:
            data = json.loads(stream.read(MAX_REPLY_BYTES))
    except (OSError, ValueError):
        return Reply()
    if not isinstance(data, dict):
        return Reply()
    live = data.get("live")
    knobs = data.get("knobs")
    seq = data.get("seq")
    return Reply(
        live=frozenset(str(name) for name in live) if isinstance(live, list) else frozenset(),
        seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
        knobs=dict(knobs) if isinstance(knobs, dict) else {},
        error=str(data.get("error") or "")[:300],
    )


class ScriptKnobs:
    """gpumon's side of one trial's request and reply files."""

    def __init__(self, request: Path, reply: Path) -> None:
        self.request_path = request
        self.reply_path = reply
        self.seq = 0
        self.wanted: dict[str, Any] = {}

    def env(self) -> dict[str, str]:
        """The variables that tell the trial's script where the files are."""
        return {KNOBS_LIVE_ENV: str(self.request_path), KNOBS_LIVE_ACK_ENV: str(self.reply_path)}

    def live(self) -> frozenset[str]:
        """The knobs the script said it can change while it runs (none until it answered)."""
        return read_reply(self.reply_path).live

    def values(self) -> Mapping[str, Any]:
        """The script's knob values now, as it last reported them."""
        return read_reply(self.reply_path).knobs

    def request(self, knobs: Mapping[str, Any]) -> None:
        """Ask for `knobs` (on top of everything asked before); replaces the request file in one step."""
        self.wanted.update(knobs)
        self.seq += 1
        temporary = self.request_path.with_name(self.request_path.name + ".tmp")
        temporary.write_text(json.dumps({"seq": self.seq, "knobs": self.wanted}), encoding="utf-8")
        os.replace(temporary, self.request_path)

    def in_effect(self, knobs: Mapping[str, Any]) -> bool:
        """Whether the script applied the last request and reports `knobs` at these values; ScriptRefused when it
        refused it."""
        reply = read_reply(self.reply_path)
        if reply.seq < self.seq:
            return False
        if reply.error:
            raise ScriptRefused(reply.error)
        return all(name in reply.knobs and reply.knobs[name] == value for name, value in knobs.items())
