"""The interface the dashboard reads snapshots through: a live sampler or a replayed recording."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gpumon.sampling.history import History
from gpumon.sampling.snapshot import Snapshot

SnapshotCallback = Callable[[Snapshot], None]
"""Called on the source's thread with each new snapshot."""


class SnapshotSource(Protocol):
    """Produces snapshots on a background thread and calls `on_snapshot` from that thread.

    `history` is fed by the source before each callback, so a view may read it at once.
    """

    history: History
    live: bool
    """True for a live sampler, False for a replay."""

    @property
    def description(self) -> str:
        """One line for the title bar, e.g. 'live' or 'replay of run.jsonl at 2x'."""

    @property
    def interval(self) -> float:
        """Seconds between snapshots (for a replay: the recorded spacing divided by the speed)."""

    @property
    def paused(self) -> bool:
        """Whether it is paused (the dashboard's pause): no new snapshots."""

    def start(self, on_snapshot: SnapshotCallback) -> None:
        """Start the thread that calls `on_snapshot` with each snapshot (from that thread)."""

    def stop(self) -> None:
        """Stop the thread and release NVML; safe to call twice."""

    def pause(self) -> None:
        """Take no more snapshots (a replay stops where it is) until `resume`."""

    def resume(self) -> None:
        """Take snapshots again, the next one at once."""

    def faster(self) -> None:
        """Live: shorter interval (down to sampling.interval.MIN_INTERVAL_S). Replay: higher speed."""

    def slower(self) -> None:
        """Live: longer interval (up to sampling.interval.MAX_INTERVAL_S). Replay: lower speed."""


INTERVAL_STEPS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)
SPEED_STEPS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def next_step(steps: tuple[float, ...], current: float, direction: int) -> float:
    """The neighbouring value in `steps` above (direction=1) or below (-1) `current`, clamped."""
    if direction > 0:
        return next((step for step in steps if step > current + 1e-9), steps[-1])
    return next((step for step in reversed(steps) if step < current - 1e-9), steps[0])
