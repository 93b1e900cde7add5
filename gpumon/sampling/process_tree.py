"""Every process on the host as trees (the dashboard's 'all processes' view): pid, user, command, CPU%, RSS, state."""

from __future__ import annotations

from dataclasses import replace

import psutil

from gpumon.sampling.snapshot import ProcessSample

KERNEL_THREADS_PARENT = 2
"""kthreadd: its children are kernel threads, left out as htop does."""
MAX_TREE_DEPTH = 32
"""Deeper descendants are left out (the table shows no deeper either)."""
_ATTRS = ["pid", "ppid", "username", "cmdline", "name", "status", "memory_info", "cpu_percent"]


class ProcessTreeCollector:
    """Lists every process; CPU% is since the previous collect() (psutil keeps the processes between calls), so the
    first list has none."""

    def __init__(self) -> None:
        self._primed: set[int] = set()

    def collect(self) -> tuple[ProcessSample, ...]:
        """Top-level processes (init, and any whose parent is not listed), each with its descendants nested."""
        flat: dict[int, ProcessSample] = {}
        parent_of: dict[int, int] = {}
        for process in psutil.process_iter(_ATTRS, ad_value=None):
            info = process.info
            pid, ppid = info["pid"], info["ppid"]
            if pid == KERNEL_THREADS_PARENT or ppid == KERNEL_THREADS_PARENT:
                continue
            memory = info["memory_info"]
            flat[pid] = ProcessSample(
                pid=pid,
                ppid=ppid,
                user=info["username"],
                command=" ".join(info["cmdline"] or ()) or info["name"] or "",
                cpu_percent=info["cpu_percent"] if pid in self._primed else None,
                rss=memory.rss if memory is not None else None,
                state=info["status"],
            )
            if ppid is not None:
                parent_of[pid] = ppid
        self._primed = set(flat)
        children: dict[int, list[int]] = {}
        for pid, ppid in parent_of.items():
            if ppid in flat and ppid != pid:
                children.setdefault(ppid, []).append(pid)
        roots = [pid for pid in flat if parent_of.get(pid) not in flat or parent_of.get(pid) == pid]

        def tree(pid: int, depth: int) -> ProcessSample:
            below = children.get(pid, []) if depth < MAX_TREE_DEPTH else []
            sample = flat[pid]
            return replace(sample, children=tuple(tree(child, depth + 1) for child in below)) if below else sample

        return tuple(tree(pid, 0) for pid in sorted(roots))
