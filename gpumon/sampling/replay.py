"""Replays a recording as a snapshot source, at an adjustable speed, reading it as a stream."""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpumon.printable import printable
from gpumon.sampling.history import History
from gpumon.sampling.recording import RecordedSample, RecordingError
from gpumon.sampling.snapshot import Snapshot
from gpumon.sampling.source import SPEED_STEPS, SnapshotCallback, next_step

log = logging.getLogger(__name__)

MAX_WAIT_S = 60.0
"""A longer pause in the recording (the machine slept) is replayed as this long."""
GAP_SAMPLE = 32
"""The recorded interval is the median of the first this many gaps (read ahead once, then let go)."""

JobEntriesCallback = Callable[[float, tuple[Mapping[str, Any], ...]], None]
"""Called with a snapshot's timestamp and the job entries recorded beside it, as the replay reaches it."""


def _samples(items: Iterable[Snapshot] | Iterable[RecordedSample]) -> Iterable[RecordedSample]:
    for item in items:
        yield item if isinstance(item, RecordedSample) else RecordedSample(item)


class Replayer:
    """Plays snapshots with their recorded spacing divided by `speed`; stops after the last one.

    The snapshots are an iterable (iter_recording streams a file; iter_samples with the job entries beside them):
    the replayer holds only the next one (the first GAP_SAMPLE+1 at the start), so memory does not grow with the
    recording. A bad line met mid-replay ends the replay; `error` names it. `total`, when known (a list, or
    recording.count_snapshots), shows in the description. Job entries go to the `on_jobs` callbacks as each snapshot
    is stepped over (skip_to too), before it is delivered.
    """

    live = False

    def __init__(
        self,
        snapshots: Iterable[Snapshot] | Iterable[RecordedSample],
        speed: float = 1.0,
        name: str = "recording",
        total: int | None = None,
    ) -> None:
        self._source = iter(_samples(snapshots))
        self._ahead: deque[RecordedSample] = deque(itertools.islice(self._source, GAP_SAMPLE + 1))
        self.on_jobs: list[JobEntriesCallback] = []
        """Called with each stepped snapshot's job entries (where it has some)."""
        if not self._ahead:
            raise ValueError("a replay needs at least one snapshot")
        self._median_gap = self._typical_gap(self._ahead)
        self.total = len(snapshots) if total is None and isinstance(snapshots, Sequence) else total
        self.error: str | None = None
        self.speed = speed
        self.name = name
        self.history = History()
        self.position = 0
        self.first_timestamp = self._latest = self._ahead[0].snapshot.timestamp
        self._paused = threading.Event()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def description(self) -> str:
        """The title bar's line: the file, the position in it, the speed or how it ended."""
        state = "ended" if self.finished else f"{self.speed:g}x"
        if self.error is not None:
            state = f"ended at a bad line: {self.error}"
        count = f"{self.position}/{self.total}" if self.total is not None else f"{self.position}"
        return printable(f"replay of {self.name} ({count}, {state})")  # a file's name and lines are from outside

    def latest_timestamp(self) -> float:
        """The time of the last snapshot delivered (the recording's "now"), else of the first to come."""
        return self._latest

    @property
    def snapshots_read(self) -> int:
        """Snapshots read from the recording so far (delivered, and the next ones held)."""
        return self.position + len(self._ahead)

    @property
    def finished(self) -> bool:
        """Whether the recording has no snapshot left to replay."""
        return not self._ahead

    @property
    def recorded_interval(self) -> float:
        """The usual spacing of the samples: the median gap, which one long pause in the recording does not skew."""
        return self._median_gap

    @staticmethod
    def _typical_gap(samples: Iterable[RecordedSample]) -> float:
        times = (sample.snapshot.timestamp for sample in samples)
        gaps = sorted(later - earlier for earlier, later in itertools.pairwise(times))
        median = gaps[len(gaps) // 2] if gaps else 0.0
        return median if median > 0 else 1.0

    @property
    def interval(self) -> float:
        """Seconds between snapshots: the recorded spacing divided by the speed."""
        return self.recorded_interval / self.speed

    @property
    def paused(self) -> bool:
        """Whether the replay is paused."""
        return self._paused.is_set()

    def start(self, on_snapshot: SnapshotCallback) -> None:
        """Start the replay thread, which calls `on_snapshot` with each snapshot in turn."""
        self._thread = threading.Thread(target=self._run, args=(on_snapshot,), name="gpumon-replay", daemon=True)
        self._thread.start()

    def step(self) -> Snapshot | None:
        """Advance by one snapshot synchronously (used by tests and by the threaded loop)."""
        if self.finished:
            return None
        sample = self._ahead.popleft()
        if not self._ahead:
            self._read_ahead()
        snapshot = sample.snapshot
        self.position += 1
        self._latest = snapshot.timestamp
        self.history.add(snapshot)
        if sample.jobs:
            for callback in self.on_jobs:
                callback(snapshot.timestamp, sample.jobs)
        return snapshot

    def _read_ahead(self) -> None:
        try:
            following = next(self._source, None)
        except RecordingError as error:
            self.error = str(error)
            log.warning("replay of %s ends early: %s", printable(self.name), printable(self.error))
            following = None
        if following is not None:
            self._ahead.append(following)

    def skip_to(self, seconds: float | None) -> None:
        """Step (feeding the history) until the next snapshot is the last one at most `seconds` after the first
        (None: the recording's last). Past the recording's end: ValueError saying how long the recording is."""
        while True:
            if len(self._ahead) == 1:
                self._read_ahead()
            if len(self._ahead) < 2:
                break
            if seconds is not None and self._ahead[1].snapshot.timestamp - self.first_timestamp > seconds:
                return
            self.step()
        if seconds is not None and self._ahead and seconds > (span := self._time_ahead() - self.first_timestamp):
            raise ValueError(f"--at {seconds:g} is past the recording's end ({span:.1f} s after its first snapshot)")

    def end_after_next(self) -> None:
        """Deliver the next snapshot, then end (a screenshot of one moment)."""
        while len(self._ahead) > 1:
            self._ahead.pop()
        self._source = iter(())
        self.total = self.position + len(self._ahead)

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
            gap = self._time_ahead() - snapshot.timestamp
            self._wake.wait(max(0.0, min(gap, MAX_WAIT_S)) / self.speed)
            self._wake.clear()

    def _time_ahead(self) -> float:
        """The timestamp of the next snapshot to come."""
        return self._ahead[0].snapshot.timestamp

    def stop(self) -> None:
        """Stop the replay thread (waits up to 2 s for it, unless called from it)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def pause(self) -> None:
        """Hold the replay where it is until `resume`."""
        self._paused.set()

    def resume(self) -> None:
        """Go on replaying, at once."""
        self._paused.clear()
        self._wake.set()

    def faster(self) -> None:
        """The next speed up (SPEED_STEPS)."""
        self.speed = next_step(SPEED_STEPS, self.speed, 1)
        self._wake.set()

    def slower(self) -> None:
        """The next speed down (SPEED_STEPS)."""
        self.speed = next_step(SPEED_STEPS, self.speed, -1)
        self._wake.set()
