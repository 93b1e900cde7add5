"""The jobs layer: finds, launches, connects to and stops training jobs; the only layer that spawns processes or
opens sockets. No Textual here: the dashboard, the CLI and the advisor all use these.

    scan() / list_jobs()                     discovery.py: hooked jobs (root: every user's), stale sockets removed
    JobInfo / JobGroup / group_jobs()        job_info.py: a hooked process as its hello says, the ranks of a job
    open_hook() / HookConnection             connection.py: the one connect, peer check, hello and line reader
    JobClient(pid | path | JobInfo)          client.py: one job's stream into a JobState; set_knob, diagnose
    JobState / HookedView                    jobstate.py: step history, per-second timeline, rolling stats
    PySpySampler(pid) / EstimateView         pyspy/: py-spy estimate for a job without the hook
    open_job(pid) / AttachedJob              session.py: what `gpumon attach` and `gpumon run` follow
    JobSource / JobView                      source.py, job_view.py: a followed job and the union of its views
    LaunchedJob(command)                     launch.py: a hooked job started, its group stopped as a whole
    AttachError / JobRequestError / ...      job_control.py: what the advisor asks of a job, no socket or process code
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumon.jobs.client import JobClient
    from gpumon.jobs.discovery import Discovery, list_jobs, scan
    from gpumon.jobs.job_control import AttachError, JobRequestError, LaunchError
    from gpumon.jobs.job_info import JobGroup, JobInfo, group_jobs
    from gpumon.jobs.job_view import JobView
    from gpumon.jobs.jobstate import HookedView, JobState, RankSummary, StepPoint, TimelinePoint, find_straggler
    from gpumon.jobs.launch import LaunchedJob
    from gpumon.jobs.pyspy.estimate import EstimateView
    from gpumon.jobs.pyspy.sampler import PySpySampler
    from gpumon.jobs.session import AttachedJob, open_job
    from gpumon.jobs.source import JobSource

_MODULES = {
    "client": ("JobClient",),
    "discovery": ("Discovery", "list_jobs", "scan"),
    "job_info": ("JobGroup", "JobInfo", "group_jobs"),
    "job_view": ("JobView",),
    "jobstate": ("HookedView", "JobState", "RankSummary", "StepPoint", "TimelinePoint", "find_straggler"),
    "job_control": ("AttachError", "JobRequestError", "LaunchError"),
    "launch": ("LaunchedJob",),
    "pyspy.estimate": ("EstimateView",),
    "pyspy.sampler": ("PySpySampler",),
    "session": ("AttachedJob", "open_job"),
    "source": ("JobSource",),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name: str) -> Any:
    """The names above, each imported from its module when first asked for: importing one module of the layer (the
    dashboard's discovery) does not import them all, which keeps the start-up short."""
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
