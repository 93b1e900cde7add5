"""JobSource: what the dashboard, `gpumon attach --json` and the advisor follow; its view() is a JobView copy.

AttachedJob (a hooked job, every local rank) and PySpySampler (a py-spy estimate) are JobSources; callers ask a
source for its `primary` hook client instead of checking its type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpumon.jobs.client import JobClient
    from gpumon.jobs.job_view import JobView
    from gpumon.jobs.listener import Listener


class JobSource(Protocol):
    """A job being followed on a thread of its own: start it, read `view()` copies, stop it."""

    @property
    def pid(self) -> int:
        """The job's pid (a distributed job's: the primary rank's)."""
        ...

    @property
    def ended(self) -> bool:
        """Whether the job (every rank of it) has ended."""
        ...

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` with what changed, on the source's thread."""
        ...

    def start(self, listener: Listener | None = None) -> None:
        """Start following the job on a thread of its own (`listener`: added first)."""
        ...

    def stop(self) -> None:
        """Stop following the job and join its thread."""
        ...

    def view(self) -> JobView:
        """A copy of what is known about the job now."""
        ...

    @property
    def primary(self) -> JobClient | None:
        """The hook client requests go to (diagnose, profile, knobs): the primary rank's; None for a job without the
        hook (py-spy's estimate) or while no rank is connected. Callers ask this instead of the source's type."""
        ...
