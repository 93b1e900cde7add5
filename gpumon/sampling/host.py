"""Host collector: CPU per core and total, iowait, load, memory, swap, and per-disk throughput and IOPS."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psutil

from gpumon.sampling.snapshot import CpuSample, DiskSample

_SKIPPED_DISK_PREFIXES = ("loop", "ram", "zram", "fd", "sr")
_DISKSTATS = "/proc/diskstats"
_STAT = "/proc/stat"
_SECTOR_BYTES = 512
"""/proc/diskstats counts sectors of 512 bytes whatever the device's own sector size."""


class DiskCounters(NamedTuple):
    """A disk's cumulative I/O counters."""

    read_count: int
    read_bytes: int
    write_count: int
    write_bytes: int


def read_diskstats(path: str = _DISKSTATS) -> dict[str, DiskCounters] | None:
    """Every block device's counters from one read of /proc/diskstats, or None where it cannot be read.

    psutil.disk_io_counters reads the same file but also stats /sys/block for every device on every call, which
    at a 0.25 s interval was a sixth of the sampler's fast tier.
    """
    try:
        with open(path, "rb") as diskstats:
            text = diskstats.read()
    except OSError:
        return None
    counters: dict[str, DiskCounters] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            counters[fields[2].decode(errors="replace")] = DiskCounters(
                int(fields[3]), int(fields[5]) * _SECTOR_BYTES, int(fields[7]), int(fields[9]) * _SECTOR_BYTES
            )
        except ValueError:
            continue
    return counters


# Partition names when /sys/class/block cannot tell: sda1 -> sda, nvme0n1p2 -> nvme0n1, mmcblk0p1 -> mmcblk0.
_PARTITION_PATTERN = re.compile(r"^((?:nvme\d+n\d+|mmcblk\d+)p|(?:[shv]d[a-z]+|xvd[a-z]+))(\d+)$")


class HostCollector:
    """CPU, memory and disk rates since the previous `collect()`; the first call primes the counters (rates 0)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._previous_cpu: list[CoreTicks] | None = None
        self._previous_disks: dict[str, Any] | None = None
        self._previous_disk_time = 0.0
        self._disk_names_seen: frozenset[str] = frozenset()
        self._disks_kept: tuple[str, ...] = ()

    def collect(self) -> tuple[CpuSample, tuple[DiskSample, ...]]:
        return self._cpu(), self._disks()

    # ---- CPU and memory ----------------------------------------------------------------------

    def _cpu(self) -> CpuSample:
        # Deltas of our own counters, not psutil.cpu_times_percent: that keeps one global "last" per process.
        ticks = read_cpu_ticks()
        has_iowait = True
        if ticks is None:
            ticks, has_iowait = _psutil_cpu_ticks()
        previous, self._previous_cpu = self._previous_cpu, ticks
        per_core: tuple[float, ...]
        if previous is None or len(previous) != len(ticks):
            per_core, total, iowait = tuple(0.0 for _ in ticks), 0.0, (0.0 if has_iowait else None)
        else:
            busy_sum = iowait_sum = elapsed_sum = 0.0
            cores = []
            for (total_before, idle_before, iowait_before), (total_after, idle_after, iowait_after) in zip(
                previous, ticks, strict=True
            ):
                elapsed = max(0.0, total_after - total_before)
                busy = min(max(0.0, elapsed - (idle_after - idle_before)), elapsed)
                cores.append(round(100.0 * busy / elapsed, 1) if elapsed > 0 else 0.0)
                busy_sum += busy
                iowait_sum += max(0.0, iowait_after - iowait_before)
                elapsed_sum += elapsed
            per_core = tuple(cores)
            total = round(100.0 * busy_sum / elapsed_sum, 1) if elapsed_sum > 0 else 0.0
            iowait = (round(100.0 * iowait_sum / elapsed_sum, 1) if elapsed_sum > 0 else 0.0) if has_iowait else None
        memory_total, memory_available, swap_total, swap_used = memory_and_swap()
        try:
            load = os.getloadavg()
        except OSError:
            load = (0.0, 0.0, 0.0)
        return CpuSample(
            per_core=per_core,
            total=total,
            load=(float(load[0]), float(load[1]), float(load[2])),
            iowait=iowait,
            # "used" as free(1) and htop show it: everything not available to new allocations.
            memory_used=memory_total - memory_available,
            memory_total=memory_total,
            swap_used=swap_used,
            swap_total=swap_total,
        )

    # ---- disks ---------------------------------------------------------------------------------

    def _disks(self) -> tuple[DiskSample, ...]:
        counters: dict[str, Any] | None = read_diskstats()
        if counters is None:
            try:
                counters = psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
            except (OSError, NotImplementedError, RuntimeError):
                counters = {}
        now = self._clock()
        previous, self._previous_disks = self._previous_disks, counters
        elapsed = now - self._previous_disk_time
        self._previous_disk_time = now
        names = frozenset(counters)
        if names != self._disk_names_seen:
            self._disk_names_seen = names
            self._disks_kept = tuple(sorted(_whole_disks(names)))
        samples = []
        for name in self._disks_kept:
            after = counters[name]
            before = previous.get(name) if previous is not None else None
            if before is None or elapsed <= 0:
                samples.append(DiskSample(name=name))
                continue
            samples.append(
                DiskSample(
                    name=name,
                    read_bytes_per_s=round(max(0, after.read_bytes - before.read_bytes) / elapsed, 1),
                    write_bytes_per_s=round(max(0, after.write_bytes - before.write_bytes) / elapsed, 1),
                    read_iops=round(max(0, after.read_count - before.read_count) / elapsed, 2),
                    write_iops=round(max(0, after.write_count - before.write_count) / elapsed, 2),
                )
            )
        return tuple(samples)


CoreTicks = tuple[float, float, float]
"""One core's cumulative (total, idle including iowait, iowait) CPU time, in any one unit."""


def read_cpu_ticks(path: str = _STAT) -> list[CoreTicks] | None:
    """Every core's counters from one read of /proc/stat (clock ticks), or None where it cannot be read.

    psutil.cpu_times(percpu=True) reads the same lines but builds a named tuple of floats per core, whose
    attribute reads were half of the sampler's fast tier on a 16-core host.
    """
    try:
        with open(path, "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    cores: list[CoreTicks] = []
    for line in text.splitlines():
        if not (line.startswith(b"cpu") and line[3:4].isdigit()):
            continue
        try:
            fields = [int(field) for field in line.split()[1:9]]
        except ValueError:
            return None
        if len(fields) < 5:
            return None
        # user, nice, system, idle, iowait, irq, softirq, steal; guest time is already counted in user and nice.
        cores.append((float(sum(fields)), float(fields[3] + fields[4]), float(fields[4])))
    return cores or None


def _psutil_cpu_ticks() -> tuple[list[CoreTicks], bool]:
    """read_cpu_ticks from psutil where /proc/stat cannot be read, and whether iowait is counted at all."""
    times = psutil.cpu_times(percpu=True)
    ticks: list[CoreTicks] = []
    for core in times:
        iowait = float(getattr(core, "iowait", 0.0))
        total = float(sum(core)) - getattr(core, "guest", 0.0) - getattr(core, "guest_nice", 0.0)
        ticks.append((total, float(core.idle) + iowait, iowait))
    return ticks, bool(times) and hasattr(times[0], "iowait")


def is_skipped_device(name: str) -> bool:
    """Loop, RAM and zram devices, floppies and optical drives: never interesting for training I/O."""
    return name.startswith(_SKIPPED_DISK_PREFIXES)


def partition_parent(name: str) -> str | None:
    """The whole disk a partition belongs to (sda1 -> sda), or None when `name` is not a partition."""
    sys_path = f"/sys/class/block/{name}"
    if os.path.exists(sys_path):
        if not os.path.exists(f"{sys_path}/partition"):
            return None
        return os.path.basename(os.path.dirname(os.path.realpath(sys_path)))
    match = _PARTITION_PATTERN.match(name)
    if match is None:
        return None
    prefix = match.group(1)
    return prefix[:-1] if prefix.endswith("p") and not prefix[-2].isalpha() else prefix


def _whole_disks(names: frozenset[str]) -> list[str]:
    """Names worth showing: no loop/ram devices, and no partition whose whole disk is listed too."""
    kept = []
    for name in names:
        if is_skipped_device(name):
            continue
        parent = partition_parent(name)
        if parent is not None and parent in names:
            continue
        kept.append(name)
    return kept


# ---- memory ------------------------------------------------------------------------------------

_MEMINFO = "/proc/meminfo"
_MEMINFO_KEYS = {b"MemTotal:", b"MemFree:", b"MemAvailable:", b"SwapTotal:", b"SwapFree:"}


def memory_and_swap() -> tuple[int, int, int, int]:
    """(memory total, memory available, swap total, swap used) in bytes, as psutil reports them.

    On Linux one read of /proc/meminfo: psutil's virtual_memory and swap_memory read it twice and
    swap_memory also scans /proc/vmstat for swap-in/out counts gpumon does not show (together about
    four times the cost). psutil is used wherever /proc/meminfo lacks a field or cannot be read.
    """
    fields: dict[bytes, int] = {}
    try:
        with open(_MEMINFO, "rb") as meminfo:
            for line in meminfo:
                key = line[: line.find(b":") + 1]
                if key in _MEMINFO_KEYS:
                    fields[key] = int(line.split()[1]) * 1024
                    if len(fields) == len(_MEMINFO_KEYS):
                        break
    except (OSError, ValueError, IndexError):
        fields = {}
    total, available = fields.get(b"MemTotal:"), fields.get(b"MemAvailable:")
    if total is None or not available or b"MemFree:" not in fields:
        memory = psutil.virtual_memory()  # no MemAvailable (or 0): psutil estimates it as free(1) does
        total, available = int(memory.total), int(memory.available)
    elif available > total:
        available = fields[b"MemFree:"]  # distorted inside some containers; psutil and free(1) do the same
    swap_total, swap_free = fields.get(b"SwapTotal:"), fields.get(b"SwapFree:")
    if swap_total is None or swap_free is None:
        swap = psutil.swap_memory()
        swap_total, swap_free = int(swap.total), int(swap.free)
    return total, available, swap_total, swap_total - swap_free
