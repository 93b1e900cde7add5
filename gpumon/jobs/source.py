"""What the dashboard, `gpumon attach --json` and the advisor follow: JobSource (a job) and JobView (a copy of it).

AttachedJob (a hooked job, every local rank) and PySpySampler (a py-spy estimate) are JobSources; their views,
HookedView and EstimateView, make up JobView.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    from gpumon.jobs.client import JobClient
    from gpumon.jobs.jobstate import HookedView
    from gpumon.jobs.pyspy import EstimateView

Listener = Callable[[str], None]
"""Called on the source's thread with what changed ('hello', 'steps', 'state', 'estimate', 'ended', ...)."""


JobView: TypeAlias = "HookedView | EstimateView"
"""A copy of what is known about a job, safe to read on any thread: the hook's view or py-spy's estimate. Both have
pid, pids, worker_pids, device_uuids, command, ended and end_reason; code that reads what only one kind has matches
on the kind, and mypy checks that every kind is handled (typing.assert_never)."""


class JobSource(Protocol):
    """A job being followed on a thread of its own: start it, read `view()` copies, stop it."""

    @property
    def pid(self) -> int: ...

    @property
    def ended(self) -> bool: ...

    def add_listener(self, listener: Listener) -> None: ...

    def start(self, listener: Listener | None = None) -> None: ...

    def stop(self) -> None: ...

    def view(self) -> JobView: ...

    @property
    def primary(self) -> JobClient | None:
        """The hook client requests go to (diagnose, profile, knobs): the primary rank's; None for a job without the
        hook (py-spy's estimate) or while no rank is connected. Callers ask this instead of the source's type."""
        ...
