"""Process collector: the processes on GPUs (and tracked pids) with their descendants, CPU, memory and I/O rates."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import psutil

from gpumon.sampling.nvml import GpuProcess
from gpumon.sampling.snapshot import ProcessSample

_PROC = "/proc"
MAX_PROCESSES = 1024
"""Process entries in one snapshot at most, descendants included (a node's GPU jobs and their workers are a few
hundred): past it the processes using the least GPU memory, then CPU, are left out, whether sampled or read from a
recording (15,000 processes in a recording took 408 MB replayed, and 105,000 exporter series)."""
MAX_CHILDREN = 128
"""Descendants kept under one process (DataLoader workers are a few dozen): the busiest on CPU."""


@dataclass(slots=True)
class _Tracked:
    """A cached psutil.Process with what must persist between samples for rates."""

    process: psutil.Process
    create_time: float
    command: str = ""
    user: str | None = None
    io_bytes: tuple[int, int] | None = None
    io_time: float = 0.0
    primed_cpu: bool = False
    seen: bool = field(default=True)


@dataclass(slots=True)
class _GpuUse:
    gpu_indices: list[int] = field(default_factory=list)
    memory: int | None = None
    sm_percents: list[float] = field(default_factory=list)

    @property
    def sm_percent(self) -> float | None:
        """The mean over its GPUs that report one (a process on two busy GPUs is 90%, not 180%), at most 100."""
        return min(100.0, sum(self.sm_percents) / len(self.sm_percents)) if self.sm_percents else None


class ProcessCollector:
    """Builds ProcessSample trees: each GPU process (or tracked pid) with its descendants as `children`.

    Process objects are cached by (pid, create time) so CPU% and I/O rates are deltas since the previous
    `collect()`; a process seen for the first time has cpu_percent and I/O rates None.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tracked: dict[int, _Tracked] = {}
        self._parents = ParentMap()

    def collect(self, gpu_processes: Iterable[GpuProcess], extra_pids: Iterable[int] = ()) -> tuple[ProcessSample, ...]:
        """The processes on the GPUs (and `extra_pids`), each with its descendants as children."""
        gpu_use = _group_by_pid(gpu_processes)
        roots = set(gpu_use) | {int(pid) for pid in extra_pids}
        if not roots:
            self._tracked.clear()
            return ()
        children_of, gone = self._parents.refresh()
        for pid in gone:
            self._tracked.pop(pid, None)  # exited; a pid seen again later is a new process
        descendants = {pid: _descendants(pid, children_of) for pid in roots}
        # A root that descends from another root (a GPU worker of a tracked job) is shown under it only.
        nested = {pid for root in roots for pid in descendants[root]}
        top_level = [pid for pid in roots if pid not in nested]
        for tracked in self._tracked.values():
            tracked.seen = False
        samples = []
        for pid in top_level:
            children = tuple(
                sample
                for child in sorted(descendants[pid])
                if (sample := self._sample(child, gpu_use.get(child), ())) is not None
            )
            sample = self._sample(pid, gpu_use.get(pid), children)
            if sample is None:
                if pid not in gpu_use:
                    continue  # a tracked pid that has exited
                use = gpu_use[pid]
                sample = ProcessSample(
                    pid=pid,
                    gpu_indices=tuple(use.gpu_indices),
                    gpu_memory=use.memory,
                    sm_percent=use.sm_percent,
                    children=children,
                )
            samples.append(sample)
        self._tracked = {pid: tracked for pid, tracked in self._tracked.items() if tracked.seen}
        samples.sort(key=lambda sample: (-(sample.gpu_memory if sample.gpu_memory is not None else -1), sample.pid))
        return keep_top_processes(samples)

    def _sample(self, pid: int, use: _GpuUse | None, children: tuple[ProcessSample, ...]) -> ProcessSample | None:
        """One process as psutil sees it, or None where psutil cannot (exited, or another PID namespace)."""
        tracked = self._track(pid)
        if tracked is None:
            return None
        process = tracked.process
        now = self._clock()
        try:
            with process.oneshot():
                cpu = process.cpu_percent(interval=None)
                rss = process.memory_info().rss
                state = process.status()
                ppid = process.ppid()
                read_rate, write_rate = self._io_rates(tracked, now)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            self._tracked.pop(pid, None)
            return None
        except psutil.AccessDenied:
            cpu, rss, state, ppid, read_rate, write_rate = None, None, None, None, None, None
        if ppid is not None:
            self._parents.correct(pid, ppid)
        primed, tracked.primed_cpu = tracked.primed_cpu, True
        return ProcessSample(
            pid=pid,
            ppid=ppid,
            user=tracked.user,
            command=tracked.command,
            gpu_indices=tuple(use.gpu_indices) if use is not None else (),
            gpu_memory=use.memory if use is not None else None,
            sm_percent=use.sm_percent if use is not None else None,
            cpu_percent=cpu if primed else None,
            rss=rss,
            state=state,
            read_bytes_per_s=read_rate,
            write_bytes_per_s=write_rate,
            children=children,
        )

    def _track(self, pid: int) -> _Tracked | None:
        tracked = self._tracked.get(pid)
        if tracked is not None:
            if self._parents.tracks_exits or tracked.process.is_running():
                tracked.seen = True
                return tracked
            del self._tracked[pid]  # exited, or the pid was reused by a new process
        try:
            process = psutil.Process(pid)
            with process.oneshot():
                create_time = process.create_time()
                command = _command(process)
                user = _user(process)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return None
        tracked = _Tracked(process=process, create_time=create_time, command=command, user=user)
        self._tracked[pid] = tracked
        return tracked

    @staticmethod
    def _io_rates(tracked: _Tracked, now: float) -> tuple[float | None, float | None]:
        try:
            counters = tracked.process.io_counters()
        except (psutil.AccessDenied, AttributeError, NotImplementedError):
            return None, None
        current = (counters.read_bytes, counters.write_bytes)
        previous, previous_time = tracked.io_bytes, tracked.io_time
        tracked.io_bytes, tracked.io_time = current, now
        elapsed = now - previous_time
        if previous is None or elapsed <= 0:
            return None, None
        read_rate = round(max(0, current[0] - previous[0]) / elapsed, 1)
        write_rate = round(max(0, current[1] - previous[1]) / elapsed, 1)
        return read_rate, write_rate


def keep_top_processes(processes: Sequence[ProcessSample]) -> tuple[ProcessSample, ...]:
    """`processes` cut to MAX_PROCESSES entries, descendants included, and MAX_CHILDREN descendants each: the
    processes using the most GPU memory, then CPU, kept in their order, each with its busiest descendants."""
    if len(processes) + sum(len(process.children) for process in processes) <= MAX_PROCESSES and all(
        len(process.children) <= MAX_CHILDREN for process in processes
    ):
        return tuple(processes)
    kept = _top(processes, MAX_PROCESSES)
    room = MAX_PROCESSES - len(kept)
    for index in sorted(kept, key=lambda index: _weight(processes[index]), reverse=True):
        process = processes[index]
        children = _top(process.children, min(MAX_CHILDREN, room))
        room -= len(children)
        if len(children) < len(process.children):
            process = replace(process, children=tuple(process.children[child] for child in children))
        kept[index] = process
    return tuple(kept.values())


def _top(processes: Sequence[ProcessSample], most: int) -> dict[int, ProcessSample]:
    """The `most` heaviest of `processes` by index, in their order."""
    if len(processes) <= most:
        return dict(enumerate(processes))
    heaviest = sorted(range(len(processes)), key=lambda index: _weight(processes[index]), reverse=True)[:most]
    return {index: processes[index] for index in sorted(heaviest)}


def _weight(process: ProcessSample) -> tuple[int, float]:
    return (process.gpu_memory or 0, process.cpu_percent or 0.0)


def _group_by_pid(gpu_processes: Iterable[GpuProcess]) -> dict[int, _GpuUse]:
    """NVML's per-GPU entries folded into one per pid: GPU indices and memory summed over GPUs, their SM% kept for
    the mean."""
    grouped: dict[int, _GpuUse] = {}
    for entry in gpu_processes:
        use = grouped.setdefault(entry.pid, _GpuUse())
        if entry.gpu_index not in use.gpu_indices:
            use.gpu_indices.append(entry.gpu_index)
            use.gpu_indices.sort()
        if entry.used_memory is not None:
            use.memory = (use.memory or 0) + entry.used_memory
        if entry.sm_percent is not None:
            use.sm_percents.append(entry.sm_percent)
    return grouped


class ParentMap:
    """pid -> parent pid of every process, kept up to date by listing /proc and reading `stat` of new pids only.

    Re-reading every process each tick would cost ~13 us a process (~13 ms on a host running 1000).
    Where /proc is missing it falls back to a full psutil scan each time.
    """

    def __init__(self) -> None:
        self._parent: dict[int, int] = {}
        self.tracks_exits = os.path.isdir(_PROC)
        """True when refresh() reports every exit, so a cached pid that was not reported is still the same process."""

    def refresh(self) -> tuple[dict[int, list[int]], set[int]]:
        """(parent pid -> child pids, pids gone since the previous refresh)."""
        if not self.tracks_exits:
            return _children_map_psutil(), set()
        try:
            pids = {int(entry) for entry in os.listdir(_PROC) if entry.isdigit()}
        except OSError:
            return _children_map_psutil(), set()
        gone = self._parent.keys() - pids
        for pid in gone:
            del self._parent[pid]
        for pid in pids - self._parent.keys():
            parent = _read_parent(pid)
            if parent is not None:
                self._parent[pid] = parent
        children: dict[int, list[int]] = {}
        for pid, parent in self._parent.items():
            children.setdefault(parent, []).append(pid)
        return children, gone

    def correct(self, pid: int, parent: int) -> None:
        """Record a parent read elsewhere (a process re-parented after its parent exited)."""
        if pid in self._parent:
            self._parent[pid] = parent


def _read_parent(pid: int) -> int | None:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the ppid is the 2nd field after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split(b" ", 2)
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def _children_map_psutil() -> dict[int, list[int]]:
    """parent pid -> child pids from a full psutil scan (where /proc cannot be listed)."""
    children: dict[int, list[int]] = {}
    for process in psutil.process_iter(["ppid"]):
        ppid = process.info.get("ppid")
        if ppid is not None:
            children.setdefault(ppid, []).append(process.pid)
    return children


def _descendants(pid: int, children_of: dict[int, list[int]]) -> set[int]:
    found: set[int] = set()
    stack = list(children_of.get(pid, ()))
    while stack:
        child = stack.pop()
        if child in found or child == pid:
            continue
        found.add(child)
        stack.extend(children_of.get(child, ()))
    return found


def _command(process: psutil.Process) -> str:
    try:
        command = " ".join(process.cmdline())
    except (psutil.AccessDenied, psutil.ZombieProcess):
        command = ""
    if not command:
        try:
            command = process.name()
        except psutil.Error:
            command = ""
    return command


def _user(process: psutil.Process) -> str | None:
    try:
        return process.username()
    except (psutil.AccessDenied, KeyError):
        return None
