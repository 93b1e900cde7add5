"""Sending SIGINT, SIGTERM or SIGKILL to a process or a whole job (its ranks, launcher and DataLoader workers).

A Target pins a process by pid and start time, so a pid reused between choosing and sending is never signalled.
A job's processes are what /proc shows (its descendants, its launcher, its sibling ranks run by the same user),
never a pid only because a hook message names it. gpumon never signals itself or its own ancestors, and only root
signals another user's processes (the kernel's rule, reported as one line).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import psutil

SIGNALS: dict[str, signal.Signals] = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
"""The signals gpumon sends, by name."""
LAUNCHER_MARKERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "torch/distributed/run.py")
"""A parent whose command line holds one of these launched the process as one rank of a distributed job."""
MAX_TARGETS = 4096
"""The most processes one job signal reaches (bounds the walk of a pathological process tree)."""


@dataclass(frozen=True, slots=True)
class Target:
    """One process to signal, pinned by its start time."""

    pid: int
    started: float
    """psutil's create_time: a process with this pid but another start time is someone else."""
    command: str
    user: str

    @property
    def ours(self) -> bool:
        """Whether this user may signal it (root may signal anyone)."""
        return os.geteuid() == 0 or self.user == _our_user()


@dataclass(frozen=True, slots=True)
class SignalResult:
    """What happened to one target: sent, or why not (one line)."""

    target: Target
    error: str | None = None

    @property
    def sent(self) -> bool:
        """Whether the signal was sent (no error)."""
        return self.error is None


def _our_user() -> str:
    try:
        return psutil.Process().username()
    except (psutil.Error, KeyError):
        return str(os.getuid())


def _target(process: psutil.Process) -> Target | None:
    try:
        with process.oneshot():
            started = process.create_time()
            try:
                user = process.username()
            except KeyError:  # a uid without a passwd entry (containers)
                user = str(process.uids().real)
            try:
                command = " ".join(process.cmdline()) or process.name()
            except psutil.AccessDenied:
                command = process.name()
    except psutil.Error:
        return None
    return Target(process.pid, started, command, user)


def target(pid: int) -> Target | None:
    """The process with this pid now, or None when there is none (or it cannot be read at all)."""
    try:
        return _target(psutil.Process(pid))
    except psutil.Error:
        return None


def _protected() -> frozenset[int]:
    """gpumon itself and its ancestors (signalling the shell that runs gpumon is never meant), and pids 0 and 1."""
    pids = {0, 1, os.getpid()}
    try:
        pids.update(parent.pid for parent in psutil.Process().parents())
    except psutil.Error:
        pass
    return frozenset(pids)


def _with_descendants(process: psutil.Process) -> list[psutil.Process]:
    try:
        return [process, *process.children(recursive=True)]
    except psutil.Error:
        return [process]


def _owner(process: psutil.Process) -> int | None:
    """The uid a process runs as (real and effective the same), None when gone, unreadable or setuid."""
    try:
        uids = process.uids()
    except psutil.Error:
        return None
    return uids.real if uids.real == uids.effective else None


def _parent_pid(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


def _launcher(process: psutil.Process) -> psutil.Process | None:
    """The torchrun (or torch.distributed.launch) process that started this rank, run by the same user, if any."""
    try:
        parent = process.parent()
        command = " ".join(parent.cmdline()) if parent is not None else ""
    except psutil.Error:
        return None
    if parent is None or not any(marker in command for marker in LAUNCHER_MARKERS):
        return None
    return parent if _owner(parent) is not None and _owner(parent) == _owner(process) else None


def _same_job(rank: psutil.Process, head: psutil.Process) -> bool:
    """Whether /proc shows `rank` as another rank of `head`'s job: run by the same user, started by the same parent
    (the torchrun launcher, or the process that spawned the ranks; never init, which adopts every orphan)."""
    owner, parent = _owner(head), _parent_pid(head)
    return (
        owner is not None
        and _owner(rank) == owner
        and parent is not None
        and parent > 1
        and _parent_pid(rank) == parent
    )


def process_targets(pid: int) -> list[Target]:
    """Just this process (empty when it is gone, or is gpumon or one of its ancestors)."""
    found = target(pid)
    return [found] if found is not None and pid not in _protected() else []


def job_targets(pid: int, ranks: Iterable[Collection[int]] = ()) -> list[Target]:
    """The whole job this process leads: itself, its descendants (DataLoader workers), and where it is one rank of
    a distributed job, its torchrun launcher and every rank with their descendants.

    ranks: the pid groups of the hooked jobs known (the ranks of one job each); a group holding `pid` joins in, each
    of its pids only where /proc shows it as a rank of the same job (_same_job): a pid is never signalled because a
    hook message named it. Launchers and ranks come first, then their workers; gpumon and its ancestors are left out.
    """
    try:
        root = psutil.Process(pid)
    except psutil.Error:
        return []
    heads: list[psutil.Process] = []
    launcher = _launcher(root)
    if launcher is not None:
        heads.append(launcher)
    heads.append(root)
    for group in ranks:
        if pid in group:
            for rank in sorted(group):
                try:
                    process = psutil.Process(rank)
                except psutil.Error:
                    continue
                if rank != pid and _same_job(process, root):
                    heads.append(process)
    protected = _protected()
    seen: set[int] = set()
    targets: list[Target] = []
    for head in heads:
        for process in _with_descendants(head):
            if process.pid in seen or process.pid in protected or len(targets) >= MAX_TARGETS:
                continue
            seen.add(process.pid)
            found = _target(process)
            if found is not None:
                targets.append(found)
    return targets


def send_signal(targets: Iterable[Target], sig: signal.Signals) -> list[SignalResult]:
    """Send `sig` to each target still running as the same process; one result per target, never raises."""
    results: list[SignalResult] = []
    protected = _protected()
    for each in targets:
        results.append(SignalResult(each, _send(each, sig, protected)))
    return results


def _send(each: Target, sig: signal.Signals, protected: frozenset[int]) -> str | None:
    if each.pid in protected:
        return "gpumon does not signal itself or its parents"
    try:
        process = psutil.Process(each.pid)
        if process.create_time() != each.started:
            return "already gone (its pid now belongs to another process)"
        process.send_signal(sig)
    except psutil.NoSuchProcess:
        return "already gone"
    except psutil.AccessDenied:
        return f"not permitted: a process of {each.user} (only root signals other users' processes)"
    except (psutil.Error, OSError) as error:
        return str(error) or type(error).__name__
    return None


def summary(results: Iterable[SignalResult], sig: signal.Signals) -> str:
    """One line: 'SIGTERM sent to 3 processes' and, where some failed, the first reason."""
    results = list(results)
    sent = [result for result in results if result.sent]
    failed = [result for result in results if not result.sent]
    line = f"{sig.name} sent to {len(sent)} process{'es' if len(sent) != 1 else ''}"
    if failed:
        first = failed[0]
        line += f"; {len(failed)} not: pid {first.target.pid}: {first.error}"
    return line
