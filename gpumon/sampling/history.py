"""Fixed-capacity ring buffers of every numeric metric and of per-GPU events, covering at least ten minutes."""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Iterator

from gpumon.sampling.snapshot import GpuSample, Snapshot, XidEvent

HISTORY_SECONDS = 600.0
FASTEST_INTERVAL = 0.1
_GPU_METRICS = (
    "utilization_gpu",
    "utilization_memory",
    "memory_percent",
    "sm_activity",
    "sm_occupancy",
    "tensor_activity",
    "dram_bandwidth",
    "power",
    "temperature",
    "pcie_rx",
    "pcie_tx",
)


PROCESS_STARTED = 1
"""Event bits of a GPU's `events` series: a process began using the GPU in this sample..."""
PROCESS_ENDED = 2
"""... one stopped using it ..."""
THROTTLED = 4
"""... its clocks are held back (any clock-event reason but idle) ..."""
XID_ERROR = 8
"""... it reported an XID error since the previous sample."""


def active_throttle_reasons(gpu: GpuSample) -> tuple[str, ...]:
    """The clock-event reasons that hold clocks back: all of them except idle."""
    return tuple(reason for reason in gpu.throttle_reasons or () if "idle" not in reason.lower())


class RingBuffer:
    """Floats in a preallocated array; None is stored as NaN and read back as None."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._values = array("d", [math.nan]) * capacity
        self._next = 0
        self._count = 0

    def append(self, value: float | None) -> None:
        """Add a value (None: missing), overwriting the oldest once full."""
        self._values[self._next] = math.nan if value is None else float(value)
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def __len__(self) -> int:
        return self._count

    def last(self, count: int, skip: int = 0) -> list[float | None]:
        """The newest `count` values (fewer if fewer were stored), oldest first; `skip` newest values left out."""
        skip = max(0, min(skip, self._count))
        count = max(0, min(count, self._count - skip))
        start = (self._next - skip - count) % self.capacity
        if start + count <= self.capacity:
            raw = self._values[start : start + count]
        else:
            raw = self._values[start:] + self._values[: (start + count) % self.capacity]
        return [None if math.isnan(value) else value for value in raw]

    def __iter__(self) -> Iterator[float | None]:
        return iter(self.last(self._count))


def snapshot_metrics(snapshot: Snapshot) -> dict[str, float | None]:
    """The flat metric keys gpumon keeps history for, e.g. 'gpu0.utilization_gpu', 'disk.sda.read'."""
    metrics: dict[str, float | None] = {
        "cpu.total": snapshot.cpu.total,
        "cpu.iowait": snapshot.cpu.iowait,
        "memory.percent": snapshot.cpu.memory_percent,
    }
    for gpu in snapshot.gpus:
        for name in _GPU_METRICS:
            metrics[f"gpu{gpu.index}.{name}"] = getattr(gpu, name)
    for disk in snapshot.disks:
        metrics[f"disk.{disk.name}.read"] = disk.read_bytes_per_s
        metrics[f"disk.{disk.name}.write"] = disk.write_bytes_per_s
        metrics[f"disk.{disk.name}.iops"] = disk.read_iops + disk.write_iops
    return metrics


def gpu_pids(snapshot: Snapshot) -> dict[int, frozenset[int]]:
    """Per GPU index, the pids of the processes using it."""
    pids: dict[int, set[int]] = {gpu.index: set() for gpu in snapshot.gpus}
    for process in snapshot.processes:
        for index in process.gpu_indices:
            if index in pids:
                pids[index].add(process.pid)
    return {index: frozenset(found) for index, found in pids.items()}


def latest_xids(snapshot: Snapshot) -> dict[int, XidEvent | None]:
    """Per GPU index, the newest XID error it reported (None where none is known)."""
    return {gpu.index: gpu.xid_events[-1] if gpu.xid_events else None for gpu in snapshot.gpus}


def gpu_events(
    snapshot: Snapshot,
    pids: dict[int, frozenset[int]],
    previous_pids: dict[int, frozenset[int]],
    xids: dict[int, XidEvent | None],
    previous_xids: dict[int, XidEvent | None],
) -> dict[int, int]:
    """Per GPU index, the event bits of this sample given its pids and newest XID errors and those of the previous
    sample (a GPU's first sample marks nothing: its processes and the XID errors it lists came before this history)."""
    events: dict[int, int] = {}
    for gpu in snapshot.gpus:
        bits = THROTTLED if active_throttle_reasons(gpu) else 0
        before = previous_pids.get(gpu.index)
        if before is not None:
            now = pids[gpu.index]
            bits |= (PROCESS_STARTED if now - before else 0) | (PROCESS_ENDED if before - now else 0)
        if gpu.index in previous_xids:
            newest = xids[gpu.index]
            bits |= XID_ERROR if newest is not None and newest != previous_xids[gpu.index] else 0
        events[gpu.index] = bits
    return events


class History:
    """Per-metric ring buffers fed one snapshot at a time; safe to read from another thread.

    Besides the metrics, each GPU has an `events` series (gpu0.events: PROCESS_STARTED | PROCESS_ENDED | THROTTLED |
    XID_ERROR bits per sample), and `added` counts the snapshots ever added, so a view can tell how far the buffers
    moved.
    """

    def __init__(self, seconds: float = HISTORY_SECONDS, fastest_interval: float = FASTEST_INTERVAL) -> None:
        self.capacity = max(1, math.ceil(seconds / fastest_interval))
        self._series: dict[str, RingBuffer] = {}
        self._timestamps = RingBuffer(self.capacity)
        self._lock = threading.Lock()
        self._gpu_pids: dict[int, frozenset[int]] = {}
        self._gpu_xids: dict[int, XidEvent | None] = {}
        self.added = 0
        """Snapshots added since the start (the buffers keep the newest `capacity` of them)."""

    def add(self, snapshot: Snapshot) -> None:
        """Append a snapshot's metrics and each GPU's event bits (metrics it lacks are recorded as missing)."""
        metrics = snapshot_metrics(snapshot)
        pids, xids = gpu_pids(snapshot), latest_xids(snapshot)
        for index, bits in gpu_events(snapshot, pids, self._gpu_pids, xids, self._gpu_xids).items():
            metrics[f"gpu{index}.events"] = float(bits)
        self._gpu_pids, self._gpu_xids = pids, xids
        with self._lock:
            self.added += 1
            self._timestamps.append(snapshot.timestamp)
            for key, series in self._series.items():
                if key not in metrics:
                    series.append(None)
            for key, value in metrics.items():
                known = self._series.get(key)
                if known is None:
                    known = self._series[key] = RingBuffer(self.capacity)
                known.append(value)

    def last(self, key: str, count: int, skip: int = 0) -> list[float | None]:
        """The newest `count` values of one metric, oldest first, leaving out the `skip` newest; empty for an unknown
        key."""
        with self._lock:
            series = self._series.get(key)
            return series.last(count, skip) if series is not None else []

    def between(self, key: str, start: int, end: int) -> list[float | None]:
        """The values of samples `start` to `end` - 1 (absolute indices, as `added` counts them), one per sample:
        None where not kept (too old, not yet added, or before the metric appeared)."""
        with self._lock:
            added = self.added
            series = self._series.get(key)
            first = max(start, added - len(series) if series is not None else added)
            last = min(end, added)
            if series is None or last <= first:
                return [None] * max(0, end - start)
            values = series.last(last - first, added - last)
        return [None] * (first - start) + values + [None] * (end - last)

    def timestamps(self, count: int, skip: int = 0) -> list[float | None]:
        """The newest `count` snapshot times, oldest first, leaving out the `skip` newest."""
        with self._lock:
            return self._timestamps.last(count, skip)

    def keys(self) -> list[str]:
        """The names of the metrics kept, sorted."""
        with self._lock:
            return sorted(self._series)

    def __len__(self) -> int:
        return len(self._timestamps)
