"""Host collector: CPU per core and total, iowait, load, memory, swap, and per-disk throughput and IOPS."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from functools import reduce
from itertools import chain, repeat
from operator import add, mul, sub, truediv
from typing import Any, NamedTuple

import psutil

from gpumon.sampling.snapshot import CpuSample, DiskSample

_SKIPPED_DISK_PREFIXES = ("loop", "ram", "zram", "fd", "sr")
_DISKSTATS = "/proc/diskstats"
_STAT = "/proc/stat"
_SECTOR_BYTES = 512
"""/proc/diskstats counts sectors of 512 bytes whatever the device's own sector size."""
_READ_SIZE = 1 << 16


def read_proc(path: str) -> bytes | None:
    """A whole file from os.open and os.read until end of file, or None where it cannot be read.

    open()'s buffered file object (an fstat, a buffer, the object) added about 3 us a file on the 2-core VM, a
    quarter of the read of /proc/stat there.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(descriptor, _READ_SIZE):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    return b"".join(chunks)


class DiskCounters(NamedTuple):
    """A disk's cumulative I/O counters."""

    read_count: int
    read_bytes: int
    write_count: int
    write_bytes: int


# One /proc/diskstats line as block/genhd.c writes it, after a newline: major and minor right-aligned, the name,
# then reads, reads merged, sectors read, ms reading, writes, writes merged, sectors written (and more, not read).
_DISKSTATS_LINE = re.compile(rb"\n *\d+ +\d+ ([!-~]+) (\d+ \d+ \d+ \d+ \d+ \d+ \d+)(?!\S)")


def diskstats_rows(text: bytes) -> dict[bytes, bytes] | None:
    """Each device's name and its first seven counters, as the kernel's bytes, from one regex pass over the file;
    None where a line is not in the kernel's layout (`parse_diskstats` reads such a file)."""
    if not text.endswith(b"\n") or b"\r" in text:
        return None
    rows = _DISKSTATS_LINE.findall(b"\n" + text)
    if len(rows) != text.count(b"\n"):
        return None
    return dict(rows)


def counters_of(fields: Sequence[bytes]) -> DiskCounters:
    """A device's counters from its first seven fields as the kernel writes them (reads, reads merged, sectors read,
    ms reading, writes, writes merged, sectors written): /proc/diskstats after the name, /sys/block/NAME/stat.
    ValueError where one is not a number."""
    return DiskCounters(int(fields[0]), int(fields[2]) * _SECTOR_BYTES, int(fields[4]), int(fields[6]) * _SECTOR_BYTES)


def row_counters(fields: bytes) -> DiskCounters:
    """A device's counters from its row in `diskstats_rows`."""
    return counters_of(fields.split())


def parse_diskstats(text: bytes) -> dict[str, DiskCounters]:
    """Every block device's counters in /proc/diskstats' text, each line split and converted in turn; a line with
    fewer than ten fields or a counter that is not a number is left out."""
    counters: dict[str, DiskCounters] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        try:
            counters[fields[2].decode(errors="replace")] = counters_of(fields[3:10])
        except ValueError:
            continue
    return counters


def read_diskstats(path: str = _DISKSTATS) -> Mapping[str, DiskCounters] | None:
    """Every block device's counters from one read of /proc/diskstats (`diskstats_counters`), or None where it
    cannot be read.

    psutil.disk_io_counters reads the same file but also stats /sys/block for every device on every call, which
    at a 0.25 s interval was a sixth of the sampler's fast tier.
    """
    text = read_proc(path)
    return None if text is None else diskstats_counters(text)


class DiskRows(Mapping[str, DiskCounters]):
    """Every device of one /proc/diskstats read (`diskstats_rows`), each turned into DiskCounters only when looked
    up: of some 60 devices (loops, partitions) the dashboard shows a few."""

    def __init__(self, rows: dict[bytes, bytes]) -> None:
        self.rows = rows
        self._counters: dict[str, DiskCounters] = {}

    def __getitem__(self, name: str) -> DiskCounters:
        counters = self._counters.get(name)
        if counters is None:
            counters = self._counters[name] = row_counters(self.rows[name.encode()])
        return counters

    def __iter__(self) -> Iterator[str]:
        return (name.decode() for name in self.rows)

    def __len__(self) -> int:
        return len(self.rows)


_SYS_BLOCK = "/sys/block"
# Partition names when /sys/class/block cannot tell: sda1 -> sda, nvme0n1p2 -> nvme0n1, mmcblk0p1 -> mmcblk0.
_PARTITION_PATTERN = re.compile(r"^((?:nvme\d+n\d+|mmcblk\d+)p|(?:[shv]d[a-z]+|xvd[a-z]+))(\d+)$")


class HostCollector:
    """CPU, memory and disk rates since the previous `collect()`; the first call primes the counters (rates 0)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sys_block: str | None = None) -> None:
        self._clock = clock
        self._previous_cpu: CpuTicks | None = None
        self._percents = _RoundedPercents()
        self._previous_disks: Mapping[str, Any] | None = None
        self._previous_disk_time = 0.0
        self._disk_names_seen: Set[Any] = frozenset()
        self._disks_kept: tuple[str, ...] = ()
        self._sys_block = sys_block if sys_block is not None else _SYS_BLOCK
        self._block_disks: tuple[str, ...] | None = None
        """The disks /sys/block listed last (None: list again, or read /proc/diskstats where it cannot be listed)."""
        self._block_disks_listed_at = 0.0

    def collect(self) -> tuple[CpuSample, tuple[DiskSample, ...]]:
        """The host's CPU and memory figures, and one sample per shown disk."""
        return self._cpu(), self._disks()

    # ---- CPU and memory ----------------------------------------------------------------------

    def _cpu(self) -> CpuSample:
        # Deltas of our own counters, not psutil.cpu_times_percent: that keeps one global "last" per process.
        ticks = read_cpu_ticks(_STAT)
        has_iowait = True
        if ticks is None:
            ticks, has_iowait = _psutil_cpu_ticks()
        previous, self._previous_cpu = self._previous_cpu, ticks
        per_core: tuple[float, ...]
        if previous is None or len(previous.total) != len(ticks.total):
            per_core, total, iowait = (0.0,) * len(ticks.total), 0.0, (0.0 if has_iowait else None)
        else:
            per_core, busy_sum, iowait_sum, elapsed_sum = self._busy_since(previous, ticks)
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

    def _busy_since(self, before: CpuTicks, after: CpuTicks) -> tuple[tuple[float, ...], float, float, float]:
        """(each core's percent busy, and the busy, iowait and elapsed time summed over the cores) between two reads.

        Counter by counter with map() in C, the sums left-to-right additions from 0.0 as a loop over the cores makes
        them. Where a core's time did not move or its idle time stepped back (the kernel's iowait can), the clamps
        of `_busy_by_core` decide.
        """
        elapsed = list(map(sub, after.total, before.total))
        idle = list(map(sub, after.idle, before.idle))
        busy = list(map(sub, elapsed, idle))
        if min(elapsed, default=1) <= 0 or min(idle, default=0) < 0 or min(busy, default=0) < 0:
            return _busy_by_core(before, after)
        iowait = list(map(sub, after.iowait, before.iowait))
        if min(iowait, default=0) < 0:
            iowait = list(map(max, repeat(0.0), iowait))
        per_core = tuple(map(self._percents.__getitem__, map(truediv, map(mul, repeat(100.0), busy), elapsed)))
        return per_core, reduce(add, busy, 0.0), reduce(add, iowait, 0.0), reduce(add, elapsed, 0.0)

    # ---- disks ---------------------------------------------------------------------------------

    def _disks(self) -> tuple[DiskSample, ...]:
        counters: Mapping[str, Any] | None = self._block_disk_counters()
        if counters is None:
            counters = _read_disk_counters()
        now = self._clock()
        previous, self._previous_disks = self._previous_disks, counters
        elapsed = now - self._previous_disk_time
        self._previous_disk_time = now
        # The kernel's names as they are, compared as a set (a view of a dict's keys does): no decoding per call.
        names = counters.rows.keys() if isinstance(counters, DiskRows) else counters.keys()
        if names != self._disk_names_seen:
            self._disk_names_seen = names
            self._disks_kept = tuple(sorted(_whole_disks(frozenset(counters))))
        samples = []
        for name in self._disks_kept:
            after = counters[name]
            before = previous.get(name) if previous is not None else None
            if before is None or elapsed <= 0 or before == after:  # equal counters: every rate is 0.0
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

    def _block_disk_counters(self) -> dict[str, DiskCounters] | None:
        """The counters of the disks worth showing, each from its own /sys/block/NAME/stat; None where /sys/block
        cannot be listed. The disks are listed again every DISK_LIST_INTERVAL, or at once when one cannot be read.

        /proc/diskstats has every block device, and the kernel sums each one's per-CPU counters to write it. On the
        2x H200 box (32 cores) it cost 34-35 us a read against 24 us for the stat files of the disks listed there,
        and `collect` went 243 -> 229 us (benchmarks/host_collect_cost.py; 52 -> 44 us on the 2-core VM)."""
        now = self._clock()
        if self._block_disks is None or now - self._block_disks_listed_at >= DISK_LIST_INTERVAL:
            self._block_disks = list_block_disks(self._sys_block)
            self._block_disks_listed_at = now
            if self._block_disks is None:
                return None
        counters = {}
        for name in self._block_disks:
            disk = read_block_stat(name, self._sys_block)
            if disk is None:
                self._block_disks = None  # gone, or unreadable: listed again next time
                continue
            counters[name] = disk
        return counters


DISK_LIST_INTERVAL = 10.0
"""Seconds between two listings of /sys/block (a disk plugged in shows within that)."""


def list_block_disks(sys_block: str = _SYS_BLOCK) -> tuple[str, ...] | None:
    """The block devices in /sys/block worth showing (not `is_skipped_device`), sorted; None where it cannot be
    listed. /sys/block holds whole devices only: partitions are under their disk."""
    try:
        names = os.listdir(sys_block)
    except OSError:
        return None
    return tuple(sorted(name for name in names if not is_skipped_device(name)))


def read_block_stat(name: str, sys_block: str = _SYS_BLOCK) -> DiskCounters | None:
    """One block device's counters from /sys/block/NAME/stat (the fields /proc/diskstats has after the name), or
    None where it cannot be read or is not in that layout."""
    text = read_proc(f"{sys_block}/{name}/stat")
    fields = text.split() if text is not None else []
    if len(fields) < 7:
        return None
    try:
        return counters_of(fields)
    except ValueError:
        return None


def _read_disk_counters() -> Mapping[str, Any]:
    """Every block device's counters: `read_diskstats`, or psutil's where /proc/diskstats cannot be read."""
    counters = read_diskstats(_DISKSTATS)
    if counters is not None:
        return counters
    try:
        return psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
    except (OSError, NotImplementedError, RuntimeError):
        return {}


def diskstats_counters(text: bytes) -> Mapping[str, DiskCounters]:
    """Every block device's counters in /proc/diskstats' text: DiskRows where it is in the kernel's layout, else
    `parse_diskstats`'s."""
    rows = diskstats_rows(text)
    return DiskRows(rows) if rows is not None else parse_diskstats(text)


class _RoundedPercents(dict[float, float]):
    """round(percent, 1), remembered: busy and elapsed are whole ticks, so a core's percent takes a few hundred
    values at a steady interval, and round() to one decimal costs about as much as eight look-ups here."""

    _LIMIT = 4096

    def __missing__(self, percent: float) -> float:
        if len(self) >= self._LIMIT:
            self.clear()
        rounded = self[percent] = round(percent, 1)
        return rounded


class CpuTicks(NamedTuple):
    """Every core's cumulative CPU time, one sequence per counter, in any one unit."""

    total: Sequence[float]
    idle: Sequence[float]
    """Including iowait."""
    iowait: Sequence[float]


CoreTicks = tuple[float, float, float]
"""One core's cumulative (total, idle including iowait, iowait) CPU time, in any one unit."""

# A per-core line of /proc/stat after a newline, as fs/proc/stat.c writes it: "cpuN", then user, nice, system, idle,
# iowait, irq, softirq, steal (guest time is already counted in user and nice). A "cpu" line of any other form
# matches with its groups empty.
_CORE_LINE = re.compile(rb"\ncpu(?:\d+ (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)(?!\S))?")
_CORE_COUNTERS = 8


def parse_cpu_ticks(text: bytes) -> CpuTicks | None:
    """Every core's ticks in /proc/stat's text (`cpu_ticks_by_regex`, else `cpu_ticks_by_line`), or None where a
    core's line has fewer than five counters or one that is not a number."""
    ticks = cpu_ticks_by_regex(text)
    if ticks is not None:
        return ticks
    cores = cpu_ticks_by_line(text)
    return None if cores is None else CpuTicks(*(list(column) for column in zip(*cores, strict=True)))


def cpu_ticks_by_regex(text: bytes) -> CpuTicks | None:
    """Every core's ticks from one regex pass over the file and one int() per counter, summed per core by map() in
    C; None where the file is not in the kernel's layout (a core's line first, other line ends, fewer counters or
    some not numbers), which `cpu_ticks_by_line` then reads."""
    if b"\r" in text or (text.startswith(b"cpu") and text[3:4].isdigit()):
        return None
    try:
        counters = list(map(int, chain.from_iterable(_CORE_LINE.findall(text))))
    except ValueError:  # an empty group: a "cpu" line of another form
        return None
    if not counters:
        return None
    idle, iowait = counters[3::_CORE_COUNTERS], counters[4::_CORE_COUNTERS]
    per_core = zip(*[iter(counters)] * _CORE_COUNTERS, strict=True)
    return CpuTicks(list(map(sum, per_core)), list(map(add, idle, iowait)), iowait)


def cpu_ticks_by_line(text: bytes) -> list[CoreTicks] | None:
    """Every core's ticks, each line split and converted in turn; None where a core's line has fewer than five
    counters or one that is not a number, or there is no core's line."""
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


def read_cpu_ticks(path: str = _STAT) -> CpuTicks | None:
    """Every core's counters from one read of /proc/stat (clock ticks, `parse_cpu_ticks`), or None where it cannot
    be read or parsed.

    psutil.cpu_times(percpu=True) reads the same lines but builds a named tuple of floats per core, whose
    attribute reads were half of the sampler's fast tier on a 16-core host.
    """
    text = read_proc(path)
    return None if text is None else parse_cpu_ticks(text)


def _busy_by_core(before: CpuTicks, after: CpuTicks) -> tuple[tuple[float, ...], float, float, float]:
    """HostCollector._busy_since core by core, each counter's step clamped to what can be: elapsed time not below
    0, busy time between 0 and the elapsed time, iowait not below 0."""
    busy_sum = iowait_sum = elapsed_sum = 0.0
    cores = []
    for total_before, idle_before, iowait_before, total_after, idle_after, iowait_after in zip(
        *before, *after, strict=True
    ):
        elapsed = max(0.0, total_after - total_before)
        busy = min(max(0.0, elapsed - (idle_after - idle_before)), elapsed)
        cores.append(round(100.0 * busy / elapsed, 1) if elapsed > 0 else 0.0)
        busy_sum += busy
        iowait_sum += max(0.0, iowait_after - iowait_before)
        elapsed_sum += elapsed
    return tuple(cores), busy_sum, iowait_sum, elapsed_sum


def _psutil_cpu_ticks() -> tuple[CpuTicks, bool]:
    """parse_cpu_ticks from psutil where /proc/stat cannot be read, and whether iowait is counted at all."""
    times = psutil.cpu_times(percpu=True)
    total, idle, iowait = [], [], []
    for core in times:
        core_iowait = float(getattr(core, "iowait", 0.0))
        total.append(float(sum(core)) - getattr(core, "guest", 0.0) - getattr(core, "guest_nice", 0.0))
        idle.append(float(core.idle) + core_iowait)
        iowait.append(core_iowait)
    return CpuTicks(total, idle, iowait), bool(times) and hasattr(times[0], "iowait")


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
# A /proc/meminfo line gpumon reads, after a newline: "MemTotal:       24684092 kB". Another form of one of these
# lines matches with its number's group empty.
_MEMINFO_LINE = re.compile(rb"\n(MemTotal:|MemFree:|MemAvailable:|SwapTotal:|SwapFree:)(?: +(\d+)(?!\S))?")


def memory_and_swap() -> tuple[int, int, int, int]:
    """(memory total, memory available, swap total, swap used) in bytes, as psutil reports them.

    On Linux one read of /proc/meminfo: psutil's virtual_memory and swap_memory read it twice and
    swap_memory also scans /proc/vmstat for swap-in/out counts gpumon does not show (together about
    four times the cost). psutil is used wherever /proc/meminfo lacks a field or cannot be read.
    """
    text = read_proc(_MEMINFO)
    fields = {} if text is None else meminfo_fields(text)
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


def meminfo_fields(text: bytes) -> dict[bytes, int]:
    """The fields of _MEMINFO_KEYS in bytes (`meminfo_by_regex`, else `meminfo_by_line`)."""
    fields = meminfo_by_regex(text)
    return fields if fields is not None else meminfo_by_line(text)


def meminfo_by_regex(text: bytes) -> dict[bytes, int] | None:
    """The fields from one regex pass over the file; None where one of their lines is of another form or a field
    is there twice, which `meminfo_by_line` then reads."""
    lines = _MEMINFO_LINE.findall(b"\n" + text)
    try:
        fields = {key: int(kib) * 1024 for key, kib in lines}
    except ValueError:  # an empty group: a line of another form
        return None
    return fields if len(fields) == len(lines) else None


def meminfo_by_line(text: bytes) -> dict[bytes, int]:
    """The fields, each line looked at in turn up to the last field needed; none at all where one of their lines
    up to there has no number after the name."""
    fields: dict[bytes, int] = {}
    try:
        for line in text.split(b"\n"):
            key = line[: line.find(b":") + 1]
            if key in _MEMINFO_KEYS:
                fields[key] = int(line.split()[1]) * 1024
                if len(fields) == len(_MEMINFO_KEYS):
                    break
    except (ValueError, IndexError):
        return {}
    return fields
