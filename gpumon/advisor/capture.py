"""A profiler capture of a hooked job, end to end: ask the hook for N steps, wait for the trace, summarize it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpumon.advisor.trace_summary import TraceError, TraceSummary, summarize_file
from gpumon.jobs.job_control import HookRequests, JobRequestError
from gpumon.printable import printable
from gpumon.private_files import make_private_dirs

CAPTURE_TIMEOUT_S = 120.0
"""Default wait for the steps to run and the trace to be written."""


class CaptureError(Exception):
    """No capture: the job refused it, could not profile, went away, or its trace could not be read. One line."""


@dataclass(frozen=True, slots=True)
class Capture:
    """The hook's `profile_result` and the trace's summary."""

    result: dict[str, Any]
    summary: TraceSummary

    @property
    def path(self) -> str:
        return str(self.result.get("path", ""))

    def to_dict(self) -> dict[str, Any]:
        return {"result": dict(self.result), "summary": self.summary.to_dict()}


def default_trace_dir() -> str:
    """Where traces go unless told: $XDG_CACHE_HOME/gpumon/traces (~/.cache/gpumon/traces), kept after the job."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(cache), "gpumon", "traces")


def prepare_trace_parent(directory: str) -> None:
    """Create the missing parents of the trace directory, each 0700 (existing ones are left as they are); the hook
    creates and checks the directory itself."""
    parent = os.path.dirname(os.path.abspath(directory))
    if os.path.isdir(parent):
        return
    reason = make_private_dirs(parent)
    if reason is not None:
        raise CaptureError(printable(reason))


def capture(
    client: HookRequests,
    steps: int,
    *,
    directory: str | None = None,
    timeout: float = CAPTURE_TIMEOUT_S,
    on_started: Callable[[dict[str, Any]], None] | None = None,
) -> Capture:
    """Capture `steps` steps of the job behind `client` with torch.profiler and summarize the trace.

    directory: where the hook writes the trace (default_trace_dir() when None). Raises CaptureError.
    """
    directory = os.path.abspath(directory or default_trace_dir())
    prepare_trace_parent(directory)
    try:
        result = client.profile(steps, directory, timeout=timeout, on_started=on_started)
    except JobRequestError as error:
        raise CaptureError(f"pid {client.pid}: no profiler capture: {printable(str(error))}") from None
    if not result.get("available"):
        reason = printable(str(result.get("reason") or "no reason given"))
        raise CaptureError(f"pid {client.pid}: no profiler capture: {reason}")
    try:
        summary = summarize_file(str(result.get("path", "")))
    except TraceError as error:
        raise CaptureError(str(error)) from None
    return Capture(result, summary)
