"""The fleet view's data: PromQL over Prometheus's HTTP API, turned into immutable FleetSnapshots (no Textual)."""

from __future__ import annotations

from gpumon.fleet.client import PromClient, PromError, Sample, Series, check_url
from gpumon.fleet.poller import FleetPoller
from gpumon.fleet.processes import HostProcesses, ProcessRow, read_processes
from gpumon.fleet.snapshot import FleetSnapshot, GpuRow, JobRow, RankRow, read_fleet

__all__ = [
    "FleetPoller",
    "FleetSnapshot",
    "GpuRow",
    "HostProcesses",
    "JobRow",
    "ProcessRow",
    "PromClient",
    "PromError",
    "RankRow",
    "Sample",
    "Series",
    "check_url",
    "read_fleet",
    "read_processes",
]
