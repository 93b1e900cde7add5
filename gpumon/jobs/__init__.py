"""The jobs layer: finds, launches, connects to and stops training jobs; the only layer that spawns processes or
opens sockets. No Textual here: the dashboard, the CLI and the advisor all use these.

    scan() / list_jobs() / group_jobs()     discovery.py: hooked jobs (root: every user's), stale sockets removed
    open_hook() / HookConnection             connection.py: the one connect, peer check, hello and line reader
    JobClient(pid | path | JobInfo)          client.py: one job's stream into a JobState; set_knob, diagnose
    JobState / HookedView                    jobstate.py: step history, per-second timeline, rolling stats
    PySpySampler(pid) / EstimateView         pyspy.py: py-spy estimate for a job without the hook
    open_job(pid) / AttachedJob              session.py: what `gpumon attach` and `gpumon run` follow
    JobSource / JobView                      source.py: the Protocols a followed job and its view satisfy
    LaunchedJob(command)                     launch.py: a hooked job started, its group stopped as a whole
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumon.jobs.client import JobClient, JobRequestError
    from gpumon.jobs.discovery import AttachError, Discovery, JobGroup, JobInfo, group_jobs, list_jobs, scan
    from gpumon.jobs.jobstate import HookedView, JobState, RankSummary, StepPoint, TimelinePoint, find_straggler
    from gpumon.jobs.launch import LaunchedJob, LaunchError
    from gpumon.jobs.pyspy import EstimateView, PySpySampler
    from gpumon.jobs.session import AttachedJob, open_job
    from gpumon.jobs.source import JobSource, JobView

_MODULES = {
    "client": ("JobClient", "JobRequestError"),
    "discovery": ("AttachError", "Discovery", "JobGroup", "JobInfo", "group_jobs", "list_jobs", "scan"),
    "jobstate": ("HookedView", "JobState", "RankSummary", "StepPoint", "TimelinePoint", "find_straggler"),
    "launch": ("LaunchedJob", "LaunchError"),
    "pyspy": ("EstimateView", "PySpySampler"),
    "session": ("AttachedJob", "open_job"),
    "source": ("JobSource", "JobView"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """The names above, each imported from its module when first asked for: importing one module of the layer (the
    dashboard's discovery) does not import them all (issue 26 item 6, start-up)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "AttachError",
    "AttachedJob",
    "Discovery",
    "EstimateView",
    "HookedView",
    "JobClient",
    "JobGroup",
    "JobInfo",
    "JobRequestError",
    "JobSource",
    "JobState",
    "JobView",
    "LaunchError",
    "LaunchedJob",
    "PySpySampler",
    "RankSummary",
    "StepPoint",
    "TimelinePoint",
    "find_straggler",
    "group_jobs",
    "list_jobs",
    "open_job",
    "scan",
]
