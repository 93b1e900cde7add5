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
    def pid(self) -> int:
        """The hooked process's pid."""

    @property
    def ended(self) -> bool:
        """The connection is closed: the job exited, or the hook went away."""

    def view(self) -> HookedView:
        """The job as last heard from its hook: hello, state and step records."""

    def add_message_listener(self, listener: MessageListener) -> None:
        """Call `listener` with every message read from now on."""

    def set_knobs(self, knobs: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Ask the hook to apply `knobs`; its acknowledgement (which applied, when, which did not and why)."""

    def diagnose(self, steps: int, timeout: float) -> protocol.Diagnosis:
        """Ask the hook to measure `steps` steps and answer its diagnosis."""

    def profile(
        self,
        steps: int,
        directory: str | None,
        timeout: float,
        on_started: Callable[[dict[str, Any]], None] | None,
    ) -> dict[str, Any]:
        """Ask the hook for a torch.profiler capture of `steps` steps into `directory`; its summary."""


class WatchedJob(Protocol):
    """A job followed on a thread of its own (a JobSource: AttachedJob, or PySpySampler, which has no hook)."""

    @property
    def ended(self) -> bool:
        """Every process of the job has exited (or its source gave up)."""

    @property
    def primary(self) -> HookRequests | None:
        """The hooked process requests go to (rank 0 where ranks are known); None without a hook."""

    def start(self, listener: Listener | None = None) -> None:
        """Start following the job on the source's own thread, calling `listener` on what changes."""

    def stop(self) -> None:
        """Stop following and let go of the job's connections or sampler."""

    def view(self) -> JobView:
        """The job as followed so far."""


class TrialJob(WatchedJob, Protocol):
    """A trial's hooked processes, attached as they serve (AttachedJob.launched): every rank, the primary's view."""

    @property
    def clients(self) -> Sequence[HookRequests]:
        """Every hooked process of the trial, the primary first."""

    def view(self) -> HookedView:
        """The primary's view, with its hook's records."""


class TrialProcess(Protocol):
    """A trial's process group (LaunchedJob): started once, followed through its hook, stopped as a whole."""

    @property
    def pid(self) -> int:
        """The trial's launcher pid (its process group's leader)."""

    def start(self) -> TrialProcess:
        """Start the command, once (LaunchError, one line, when it cannot be); itself, started."""

    def follow(self) -> TrialJob:
        """The trial's hooked processes, attached as their hooks serve."""

    def poll(self) -> int | None:
        """The return code once the command exited (negative: killed by that signal), else None."""

    def wait(self) -> int:
        """Wait for the command to exit by itself; its return code."""

    def stop(self, grace: float) -> int | None:
        """Stop the whole group: SIGINT, `grace` s, SIGTERM, SIGKILL; the return code (None: never started)."""

    def close(self) -> int | None:
        """Stop the trial (as stop) and remove the socket directory made for it; the return code."""


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
