"""What the advisor asks of a job, without socket or process code: the Protocols gpumon.jobs satisfies, its errors."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from gpumon import protocol
    from gpumon.jobs.job_view import JobView
    from gpumon.jobs.jobstate import HookedView
    from gpumon.jobs.listener import Listener

MessageListener = Callable[[dict[str, Any]], None]
"""Called on the client's thread with every message read after the hello, as decoded."""


class AttachError(Exception):
    """A user-facing attach failure (no such job, wrong protocol, no permission): one line, shown as is."""


class NoHook(AttachError):
    """A process gpumon can see but that has no gpumon hook, which requests need: one line."""


class JobRequestError(Exception):
    """A request the job refused (its `error` reply), or one that got no reply in time."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class LaunchError(Exception):
    """A job that could not be started (a bad knob, a missing command, an unwritable log): one line, and the exit
    status a shell would give (127 not found, 126 not runnable; None: a usage error)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class HookRequests(Protocol):
    """One hooked process as the advisor asks it (JobClient): its view and messages, knobs, sync counts, traces.
    Each request raises JobRequestError when the job refuses it, does not answer in time or is gone."""

    @property
    def pid(self) -> int: ...

    @property
    def ended(self) -> bool: ...

    def view(self) -> HookedView: ...

    def add_message_listener(self, listener: MessageListener) -> None: ...

    def set_knobs(self, knobs: Mapping[str, Any], timeout: float) -> dict[str, Any]: ...

    def diagnose(self, steps: int, timeout: float) -> protocol.Diagnosis: ...

    def profile(
        self,
        steps: int,
        directory: str | None,
        timeout: float,
        on_started: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any]: ...


class WatchedJob(Protocol):
    """A job followed on a thread of its own (a JobSource: AttachedJob, or PySpySampler, which has no hook)."""

    @property
    def ended(self) -> bool: ...

    @property
    def primary(self) -> HookRequests | None: ...

    def start(self, listener: Listener | None = None) -> None: ...

    def stop(self) -> None: ...

    def view(self) -> JobView: ...


class TrialJob(WatchedJob, Protocol):
    """A trial's hooked processes, attached as they serve (AttachedJob.launched): every rank, the primary's view."""

    @property
    def clients(self) -> Sequence[HookRequests]: ...

    def view(self) -> HookedView: ...


class TrialProcess(Protocol):
    """A trial's process group (LaunchedJob): started once, followed through its hook, stopped as a whole."""

    @property
    def pid(self) -> int: ...

    def start(self) -> TrialProcess: ...

    def follow(self) -> TrialJob: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def stop(self, grace: float) -> int | None: ...

    def close(self) -> int | None: ...


class OpenJob(Protocol):
    """Opens the job `pid` is part of for watching: its hook, else py-spy (jobs.session.open_job); AttachError."""

    def __call__(self, pid: int, *, native: bool = False) -> WatchedJob: ...


AttachHooked = Callable[[int], WatchedJob]
"""Connects to the hook of the job `pid` is part of, every local rank (jobs.session.hooked_job); AttachError, NoHook
when it has none."""


class LaunchTrial(Protocol):
    """A trial of `command` with `knobs`, made but not started (jobs.launch.LaunchedJob); LaunchError (a bad knob)."""

    def __call__(
        self,
        command: Sequence[str],
        *,
        knobs: Mapping[str, Any] | None = None,
        base_env: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        log: Path | None = None,
    ) -> TrialProcess: ...
