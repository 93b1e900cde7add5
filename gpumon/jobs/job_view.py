"""JobView: the closed union of a followed job's views, the hook's (HookedView) or py-spy's estimate (EstimateView)."""

from __future__ import annotations

from typing import TypeAlias

from gpumon.jobs.jobstate import HookedView
from gpumon.jobs.pyspy.estimate import EstimateView

JobView: TypeAlias = HookedView | EstimateView
"""A copy of what is known about a job, safe to read on any thread: the hook's view or py-spy's estimate. Both have
pid, pids, worker_pids, device_uuids, command, ended and end_reason; code that reads what only one kind has matches
on the kind, and mypy checks that every kind is handled (typing.assert_never)."""
