"""`exporter --replay`: the recorded hooked jobs as the gpumon_job_* families, their figures worked out over the
recording's time and the advisor's finding as it was recorded."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpumon.advisor.categories import HEADLINES
from gpumon.advisor.rules import Finding
from gpumon.exporter.jobs import JobMetrics
from gpumon.jobs.recorded import RecordedJobs


def recorded_finding(data: Mapping[str, Any] | None) -> Finding | None:
    """The Finding a recording holds; None where there is none or it is not one this gpumon knows (its category
    becomes a label value, so only the advisor's own categories pass)."""
    if data is None:
        return None
    try:
        finding = Finding.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None
    known = finding.category in HEADLINES and math.isfinite(finding.confidence) and math.isfinite(finding.severity)
    return finding if known else None


class ReplayedJobMetrics(JobMetrics):
    """JobMetrics over a recording's job entries: no discovery, the recording's clock instead of the wall clock."""

    def __init__(self, recorded: RecordedJobs, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recorded = recorded

    def discover(self) -> None:
        """Nothing to look for: the replay feeds the recorded jobs."""

    def update(self, now: float | None = None) -> None:
        """Each recorded rank's figures over the window up to the replay's latest snapshot, with its recorded
        finding."""
        with self._snapshots_lock:
            snapshots = list(self._snapshots)
        if not snapshots:
            return
        end = snapshots[-1].timestamp if now is None else now
        start = end - self.window_s
        window = [snapshot for snapshot in snapshots if start <= snapshot.timestamp <= end]
        figures = []
        for view in self.recorded.views():
            if view.ended:
                continue
            rank = self._figures(view, window, start, end)
            figures.append(replace(rank, finding=recorded_finding(self.recorded.finding(view.pid))))
        self.figures = tuple(figures)
