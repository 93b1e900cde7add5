"""A child process that copies a tensor back and forth and counts its round trips: the bytes that truly moved,
the ground truth for the link rates NVML reports (nvlink_gpm_check.py, pcie_gpm_check.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from types import TracebackType

COPY_BYTES = 256 * 1024 * 1024
"""Bytes each copy moves: every round trip sends this much each way."""
START_UP = 8.0
"""Seconds the child is given to start CUDA and make its tensors before anything is measured."""

_LOOP = """
import time, torch
{setup}
trips, said = 0, time.monotonic()
while True:
    {trip}
    trips += 1
    if time.monotonic() - said >= 0.25:
        said = time.monotonic()
        print(said, trips, flush=True)
"""


class CopyLoad:
    """The child, as a context: started and given START_UP seconds on entry, ended on exit. `setup` makes the
    tensors (COPY_BYTES each), `trip` is one round trip, ended by its synchronizations. Every 0.25 s the child
    prints the monotonic time and its round trips so far."""

    def __init__(self, setup: str, trip: str) -> None:
        self._script = _LOOP.format(setup=setup, trip=trip)
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> CopyLoad:
        self._process = subprocess.Popen([sys.executable, "-c", self._script], stdout=subprocess.PIPE, text=True)
        time.sleep(START_UP)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> list[tuple[float, float]]:
        """End the child (once; later calls return nothing) and return the (time, round trips) it printed."""
        if self._process is None or self._process.poll() is not None:
            return []
        self._process.kill()
        output = self._process.communicate()[0]
        return [(float(when), float(trips)) for when, trips in (line.split() for line in output.splitlines() if line)]

    def rate(self, start: float, end: float) -> float | None:
        """End the child and give the GB/s it moved each way between two monotonic times; None with fewer than two
        of its counts in between."""
        inside = [(when, trips) for when, trips in self.stop() if start <= when <= end]
        if len(inside) < 2:
            return None
        (first_time, first_trips), (last_time, last_trips) = inside[0], inside[-1]
        return (last_trips - first_trips) * COPY_BYTES / (last_time - first_time) / 1e9
