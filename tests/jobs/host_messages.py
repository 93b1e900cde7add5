"""A recorded hooked job given the hook's stack-sampler counts (`host` in its state messages), for the step model's
displays."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpumon.jobs.jobstate import HookedView, replay_messages

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "job-cpu-run.jsonl"
"""A hooked CPU job of 12 s: a state message a second, none with `host` (recorded before the stack sampler)."""

Counts = tuple[int, int, int]
Line = tuple[str, int, str, str, Counts]
"""(file, line, function, activity, counts a second)."""


def recorded_messages() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDING.read_text().splitlines() if line.strip()]


def with_host(
    messages: Sequence[Mapping[str, Any]], per_second: Mapping[str, Counts], lines: Sequence[Line] = ()
) -> list[dict[str, Any]]:
    """The messages, each state message with cumulative sampler counts grown by `per_second` ((GPU idle, busy,
    unknown) by activity) and `lines` since the one before."""
    out: list[dict[str, Any]] = []
    seen = 0
    for message in messages:
        if message.get("type") != "state":
            out.append(dict(message))
            continue
        seen += 1
        activities = {name: [n * seen for n in counts] for name, counts in per_second.items()}
        host = {
            "hz": 20,
            "samples": sum(sum(counts) for counts in activities.values()),
            "gpu_state": None,
            "activities": activities,
            "lines": [
                {"file": file, "line": line, "function": function, "activity": kind, "counts": [n * seen for n in c]}
                for file, line, function, kind, c in lines
            ],
            "cost_ms": 0.5 * seen,
        }
        out.append({**message, "host": host})
    return out


def hosted_view(per_second: Mapping[str, Counts], lines: Sequence[Line] = ()) -> HookedView:
    """The recorded job's view with the sampler's counts growing by `per_second` and `lines` a second."""
    return replay_messages(with_host(recorded_messages(), per_second, lines)).view()


def state_times() -> list[float]:
    """The hook times of the recording's state messages."""
    return [float(m["t"]) for m in recorded_messages() if m.get("type") == "state"]
