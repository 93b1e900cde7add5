"""The fleet view's data: PromQL over Prometheus's HTTP API, turned into immutable FleetSnapshots (no Textual)."""

from __future__ import annotations

from gpumon.fleet.client import PromClient, PromError, Sample, Series, check_url
from gpumon.fleet.poller import FleetPoller
from gpumon.fleet.snapshot import FleetSnapshot, GpuRow, JobRow, RankRow, read_fleet

__all__ = [
    "FleetPoller",
    "FleetSnapshot",
    "GpuRow",
    "JobRow",
    "PromClient",
    "PromError",
    "RankRow",
    "Sample",
    "Series",
    "check_url",
    "read_fleet",
]
