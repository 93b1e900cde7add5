"""Fixed-capacity ring buffers of every numeric metric, covering at least ten minutes of samples."""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Iterator

from gpumon.sampling.snapshot import Snapshot

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


class RingBuffer:
    """Floats in a preallocated array; None is stored as NaN and read back as None."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._values = array("d", [math.nan]) * capacity
        self._next = 0
        self._count = 0

    def append(self, value: float | None) -> None:
        self._values[self._next] = math.nan if value is None else float(value)
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def __len__(self) -> int:
        return self._count

    def last(self, count: int) -> list[float | None]:
        """The newest `count` values (fewer if fewer were stored), oldest first."""
        count = max(0, min(count, self._count))
        start = (self._next - count) % self.capacity
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
        "memory.percent": (
            100.0 * snapshot.cpu.memory_used / snapshot.cpu.memory_total if snapshot.cpu.memory_total else None
        ),
    }
    for gpu in snapshot.gpus:
        for name in _GPU_METRICS:
            metrics[f"gpu{gpu.index}.{name}"] = getattr(gpu, name)
    for disk in snapshot.disks:
        metrics[f"disk.{disk.name}.read"] = disk.read_bytes_per_s
        metrics[f"disk.{disk.name}.write"] = disk.write_bytes_per_s
        metrics[f"disk.{disk.name}.iops"] = disk.read_iops + disk.write_iops
    return metrics


class History:
    """Per-metric ring buffers fed one snapshot at a time; safe to read from another thread."""

    def __init__(self, seconds: float = HISTORY_SECONDS, fastest_interval: float = FASTEST_INTERVAL) -> None:
        self.capacity = max(1, math.ceil(seconds / fastest_interval))
        self._series: dict[str, RingBuffer] = {}
        self._timestamps = RingBuffer(self.capacity)
        self._lock = threading.Lock()

    def add(self, snapshot: Snapshot) -> None:
        metrics = snapshot_metrics(snapshot)
        with self._lock:
            self._timestamps.append(snapshot.timestamp)
            for key, series in self._series.items():
                if key not in metrics:
                    series.append(None)
            for key, value in metrics.items():
                known = self._series.get(key)
                if known is None:
                    known = self._series[key] = RingBuffer(self.capacity)
                known.append(value)

    def last(self, key: str, count: int) -> list[float | None]:
        """The newest `count` values of one metric, oldest first; empty for an unknown key."""
        with self._lock:
            series = self._series.get(key)
            return series.last(count) if series is not None else []

    def timestamps(self, count: int) -> list[float | None]:
        with self._lock:
            return self._timestamps.last(count)

    def keys(self) -> list[str]:
        with self._lock:
            return sorted(self._series)

    def __len__(self) -> int:
        return len(self._timestamps)
