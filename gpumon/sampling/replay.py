"""Replays a recording as a snapshot source, at an adjustable speed."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

from gpumon.sampling.history import History
from gpumon.sampling.snapshot import Snapshot
from gpumon.sampling.source import SPEED_STEPS, SnapshotCallback, next_step

MAX_WAIT_S = 60.0
"""A longer pause in the recording (the machine slept) is replayed as this long."""


class Replayer:
    """Plays snapshots with their recorded spacing divided by `speed`; stops after the last one."""

    live = False

    def __init__(self, snapshots: Sequence[Snapshot], speed: float = 1.0, name: str = "recording") -> None:
        if not snapshots:
            raise ValueError("a replay needs at least one snapshot")
        self._snapshots = list(snapshots)
        self._median_gap = self._typical_gap(self._snapshots)
        self.speed = speed
        self.name = name
        self.history = History()
        self.position = 0
        self._paused = threading.Event()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def description(self) -> str:
        state = "ended" if self.finished else f"{self.speed:g}x"
        return f"replay of {self.name} ({self.position}/{len(self._snapshots)}, {state})"

    @property
    def finished(self) -> bool:
        return self.position >= len(self._snapshots)

    @property
    def recorded_interval(self) -> float:
        """The usual spacing of the samples: the median gap, which one long pause in the recording does not skew."""
        return self._median_gap

    @staticmethod
    def _typical_gap(snapshots: Sequence[Snapshot]) -> float:
        gaps = sorted(later.timestamp - earlier.timestamp for earlier, later in itertools.pairwise(snapshots))
        median = gaps[len(gaps) // 2] if gaps else 0.0
        return median if median > 0 else 1.0

    @property
    def interval(self) -> float:
        return self.recorded_interval / self.speed

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_snapshot,), name="gpumon-replay", daemon=True)
        self._thread.start()

    def step(self) -> Snapshot | None:
        """Advance by one snapshot synchronously (used by tests and by the threaded loop)."""
        if self.finished:
            return None
        snapshot = self._snapshots[self.position]
        self.position += 1
        self.history.add(snapshot)
        return snapshot

    def _run(self, on_snapshot: SnapshotCallback) -> None:
        while not self._stopped.is_set():
            if self._paused.is_set():
                self._wake.wait(0.1)
                self._wake.clear()
                continue
            snapshot = self.step()
            if snapshot is None:
                break
            on_snapshot(snapshot)
            if self.finished:
                break
            gap = self._snapshots[self.position].timestamp - snapshot.timestamp
            self._wake.wait(max(0.0, min(gap, MAX_WAIT_S)) / self.speed)
            self._wake.clear()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()
        self._wake.set()

    def faster(self) -> None:
        self.speed = next_step(SPEED_STEPS, self.speed, 1)
        self._wake.set()

    def slower(self) -> None:
        self.speed = next_step(SPEED_STEPS, self.speed, -1)
        self._wake.set()
