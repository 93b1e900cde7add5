"""The dashboard on a recording with job data: the recorded job in the job pane, the advisor's recorded finding in
the advisor panel, both as they were at the moment the replay shows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import Static

from gpumon.advisor.categories import HEADLINES
from gpumon.advisor.rules import Finding
from gpumon.jobs.recorded import RecordedJob, RecordedJobs
from gpumon.sampling.source import SnapshotSource
from gpumon.tui.advisor_panel import AdvisorPanel
from gpumon.tui.app import GpumonApp

RECORDED_HINT = "the advisor's finding as recorded · a: hide this panel"
WAITING_TEXT = "no finding recorded yet"


class RecordedJobAppeared(Message):
    """The replay reached the recording's first job entry (posted from the replay's thread)."""


def recorded_finding(data: Mapping[str, Any] | None) -> Finding | None:
    """The Finding a recording holds (Finding.to_dict()); None where there is none or it is not one this gpumon
    knows (a category it does not name, numbers that are not numbers)."""
    if data is None:
        return None
    try:
        finding = Finding.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None
    known = all(item.category in HEADLINES for item in (finding, *finding.secondary))
    return finding if known and math.isfinite(finding.confidence) else None


class ReplayApp(GpumonApp):
    """GpumonApp on a Replayer, following the recorded job once the replay reaches it, with its finding beside."""

    def __init__(self, source: SnapshotSource, recorded: RecordedJobs, **kwargs: Any) -> None:
        super().__init__(source, job=recorded.first_job(), **kwargs)
        self.recorded = recorded
        self.advisor_panel: AdvisorPanel | None = None
        self._shown_finding: Mapping[str, Any] | None = None
        recorded.add_listener(self._recorded_signal)

    def compose(self) -> ComposeResult:
        yield from super().compose()
        if self.job is not None:
            self.advisor_panel = AdvisorPanel(id="advisor")
            yield self.advisor_panel

    def on_mount(self) -> None:
        if self.advisor_panel is not None:
            self._prepare_panel(self.advisor_panel)

    def action_toggle_advisor(self) -> None:
        panel = self.advisor_panel
        if panel is not None:
            panel.set_class(not panel.has_class("-hidden"), "-hidden")

    def _recorded_signal(self, _what: str) -> None:
        """On the replay's thread: the first job entry makes the app follow the recorded job."""
        if self.job is None:
            self.post_message(RecordedJobAppeared())

    @on(RecordedJobAppeared)
    def _follow_recorded(self) -> None:
        job = self.recorded.first_job()
        if self.job is not None or job is None:
            return
        self.advisor_panel = AdvisorPanel(id="advisor")
        self.mount(self.advisor_panel)
        self._prepare_panel(self.advisor_panel)
        self._follow(job)

    def _prepare_panel(self, panel: AdvisorPanel) -> None:
        panel.query_one("#advisor-finding", Static).update(WAITING_TEXT)
        panel.query_one("#advisor-hint", Static).update(RECORDED_HINT)

    def _show_job(self) -> None:
        super()._show_job()
        panel, job = self.advisor_panel, self.job
        if panel is None or not isinstance(job, RecordedJob) or self.paused:
            return
        data = job.finding()
        if data is self._shown_finding:
            return
        self._shown_finding = data
        finding = recorded_finding(data)
        if finding is None:
            panel.query_one("#advisor-finding", Static).update(WAITING_TEXT)
        else:
            panel.show_finding(finding)
