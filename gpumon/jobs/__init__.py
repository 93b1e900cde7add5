"""Attach layer: finds hooked jobs, connects to their sockets, and falls back to py-spy for jobs without the hook.

No Textual here: the dashboard, `gpumon attach --json` and the advisor all use these.

    scan() / list_jobs() / group_jobs()     discovery.py: this user's hooked jobs, stale sockets removed
    JobClient(pid | path | JobInfo)          client.py: one job's stream into a JobState; set_knob, diagnose
    JobState / JobView                       jobstate.py: step history, per-second timeline, rolling stats
    PySpySampler(pid)                        pyspy.py: py-spy estimate for a job without the hook
    open_job(pid) / AttachedJob              session.py: what `gpumon attach` and `gpumon run` follow
"""

from gpumon.jobs.client import JobClient, JobRequestError
from gpumon.jobs.discovery import AttachError, Discovery, JobGroup, JobInfo, group_jobs, list_jobs, scan
from gpumon.jobs.jobstate import JobState, JobView, RankSummary, StepPoint, TimelinePoint, find_straggler
from gpumon.jobs.pyspy import EstimateView, PySpySampler
from gpumon.jobs.session import AttachedJob, JobSource, open_job

__all__ = [
    "AttachError", "AttachedJob", "Discovery", "EstimateView", "JobClient", "JobGroup", "JobInfo", "JobRequestError",
    "JobSource", "JobState", "JobView", "PySpySampler", "RankSummary", "StepPoint", "TimelinePoint",
    "find_straggler", "group_jobs", "list_jobs", "open_job", "scan",
]
