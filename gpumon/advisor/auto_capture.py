"""When a diagnosis takes a short profiler capture on its own, and folding the capture into the signals.

The step model names an owner for the GPU's idle time from the host's side. Two cases need the GPU's own timeline
instead: a distributed job, whose communication runs on NCCL's streams where the host cannot see it (a hand-written
all-reduce returns at once and the compute stream waits), and a job whose idle time the step model cannot give to
any host activity. Then `diagnose` captures a few steps with torch.profiler (the hook's `profile` request), says so
on stderr, and reads comm_bound's figures from the trace: NCCL time with no compute kernel beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpumon.advisor.capture import Capture, CaptureError, capture
from gpumon.advisor.signals import Signals
from gpumon.jobs.job_control import HookRequests

AUTO_CAPTURE_STEPS = 10
"""Steps captured: a few, so the capture costs the job little (profiled steps run slower)."""
UNEXPLAINED_IDLE = 0.30
"""GPU idle with no host activity behind it (the step model's `other`) at or above this share of the time."""

Notice = Callable[[str], None]


def capture_reason(signals: Signals, world_size: int | None) -> str | None:
    """Why this diagnosis should capture the GPU's timeline, None when it need not."""
    if world_size is not None and world_size > 1:
        return f"the job is distributed ({world_size} ranks): its communication runs where the host cannot see it"
    unexplained = signals.step_model.step_shares.get("other")
    if unexplained is not None and unexplained >= UNEXPLAINED_IDLE:
        return f"{unexplained:.0%} of the time the GPU idles with no host activity behind it"
    return None


def with_capture(
    signals: Signals, client: HookRequests, reason: str, notice: Notice | None, trace_dir: str | None = None
) -> tuple[Signals, Capture | None, str | None]:
    """(signals with the capture's figures, the capture, why there is none) after capturing AUTO_CAPTURE_STEPS."""
    if notice is not None:
        notice(f"gpumon: profiling {AUTO_CAPTURE_STEPS} steps of pid {client.pid} with torch.profiler: {reason}")
    try:
        captured = capture(client, AUTO_CAPTURE_STEPS, directory=trace_dir)
    except CaptureError as error:
        return signals, None, str(error)
    return replace(signals, comm=replace(signals.comm, **captured.summary.signal_values())), captured, None
