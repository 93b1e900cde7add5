"""The dashboard with a job: the job pane fed from a recorded hooked CPU run, its processes highlighted, its GPU
marked, the job's end, the layout at 80x24, and the job picker of plain `gpumon`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tui_support import FakeSource, gpu, process, snapshot, widget_text

from gpumon.jobs.job_info import JobGroup, JobInfo
from gpumon.jobs.jobstate import HookedView, replay_messages
from gpumon.tui.app import GpumonApp
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.help_screen import HelpScreen
from gpumon.tui.job_pane import JobPane
from gpumon.tui.job_picker import JobPicker
from gpumon.tui.key_bar import KeyBar
from gpumon.tui.process_table import JOB_STYLES, PidCell, ProcessTable

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "job-cpu-run.jsonl"
MESSAGES = [json.loads(line) for line in RECORDING.read_text().splitlines()]


def recorded_view(upto: int | None = None) -> HookedView:
    return replay_messages(MESSAGES[:upto]).view()


LIVE = recorded_view(len(MESSAGES) // 2)
ENDED = recorded_view()


class FakeJob:
    """A job source that shows what the test pushes, as a JobClient's thread would (here synchronously)."""

    def __init__(self, view: HookedView) -> None:
        self._view = view
        self.calls: list[str] = []
        self._listener: Any = None

    @property
    def pid(self) -> int:
        return self._view.pid

    @property
    def ended(self) -> bool:
        return self._view.ended

    def start(self, listener: Any = None) -> None:
        self.calls.append("start")
        self._listener = listener

    def stop(self) -> None:
        self.calls.append("stop")

    def view(self) -> HookedView:
        return self._view

    def push(self, view: HookedView) -> None:
        self._view = view
        assert self._listener is not None
        self._listener("steps")


class TrackingSource(FakeSource):
    def __init__(self) -> None:
        super().__init__(live=True)
        self.tracked: list[list[int]] = []

    def track_pids(self, pids: Any) -> None:
        self.tracked.append(list(pids))


class EnergySource(FakeSource):
    def __init__(self) -> None:
        super().__init__(live=True)
        self.energy_often: list[bool] = []

    def read_energy_often(self, often: bool) -> None:
        self.energy_often.append(often)


def job_snapshot(view: HookedView, **changes: Any):
    """The machine as the sampler sees it: the job's process with its DataLoader workers beneath, one other job."""
    workers = tuple(process(pid, command="python hooked_train.py") for pid in view.worker_pids)
    job = process(view.pid, children=workers, command="python hooked_train.py", gpu_indices=(0,))
    other = process(999_999, command="python other.py", gpu_indices=(0,))
    return snapshot(processes=(job, other), **changes)


async def test_without_a_job_there_is_no_job_pane_and_no_new_footer_key() -> None:
    app = GpumonApp(FakeSource())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.query(JobPane)
        footer_keys = [binding.key for (_, binding, enabled, _) in app.active_bindings.values() if binding.show]
        assert "j" not in footer_keys
        assert "j" not in {drawn.key.key for drawn in app.query_one(KeyBar).drawn}


async def test_the_job_pane_follows_the_job_and_keeps_its_history_when_it_ends() -> None:
    source, job = FakeSource(), FakeJob(LIVE)
    app = GpumonApp(source, job=job)
    async with app.run_test(size=(100, 40)) as pilot:
        source.push(job_snapshot(LIVE))
        await pilot.pause()
        pane = app.query_one(JobPane)
        assert job.calls == ["start"]
        text = widget_text(pane)
        assert f"Job {LIVE.pid}" in str(pane.border_title) and "ENDED" not in str(pane.border_title)
        assert "steps/s" in text and "SleepyDataset" in text
        job.push(ENDED)
        await pilot.pause(0.3)  # redraws are at most every 0.25 s
        text = widget_text(pane)
        assert "ENDED" in str(pane.border_title)
        assert "job ended the process exited · history kept" in text
        data_line = next(line for line in text.splitlines() if line.startswith("Data"))
        assert sum(ch in "▁▂▃▄▅▆▇█" for ch in data_line) == len(ENDED.timeline)
    assert job.calls == ["start", "stop"]


async def test_the_jobs_processes_are_highlighted_tracked_and_its_gpu_marked() -> None:
    cuda = {"initialized": True, "device": 0, "devices": [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100"}]}
    view = replace(LIVE, state={**(LIVE.state or {}), "cuda": cuda})
    source, job = TrackingSource(), FakeJob(view)
    app = GpumonApp(source, job=job)
    async with app.run_test(size=(120, 40)) as pilot:
        source.push(job_snapshot(view, gpus=(gpu(0), gpu(1, gpm=False))))
        await pilot.pause()
        table = app.query_one(ProcessTable)
        styles = {}
        for pid in table.pids:
            cell = table.get_cell(str(pid), "pid")
            assert isinstance(cell, PidCell)
            styles[pid] = str(cell.style)
        assert styles[view.pid] == JOB_STYLES["job"]
        assert all(styles[pid] == JOB_STYLES["worker"] for pid in view.worker_pids) and view.worker_pids
        assert styles[999_999] == ""
        gpu_pane = app.query_one(GpuPane)
        assert str(gpu_pane.border_title).endswith("· job on GPU0")
        assert source.tracked and source.tracked[-1] == [view.pid]


async def test_a_job_fits_80x24_with_the_cpu_and_disk_panes_folded_away() -> None:
    source, job = FakeSource(), FakeJob(LIVE)
    app = GpumonApp(source, job=job)
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(job_snapshot(LIVE))
        await pilot.pause()
        for widget in (app.query_one(GpuPane), app.query_one(JobPane), app.query_one(ProcessTable)):
            region = widget.region
            assert region.height > 0 and region.bottom <= 23 and region.right <= 80, widget
        assert app.query_one(CpuPane).region.height == 0
        assert "steps/s" in widget_text(app.query_one(JobPane))
    async with GpumonApp(FakeSource(), job=FakeJob(LIVE)).run_test(size=(80, 50)) as pilot:
        await pilot.pause()
        assert pilot.app.query_one(CpuPane).region.height > 0


async def test_help_explains_the_job_pane_only_with_a_job() -> None:
    async with GpumonApp(FakeSource(), job=FakeJob(LIVE)).run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen) and pilot.app.screen.job
    async with GpumonApp(FakeSource()).run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(pilot.app.screen, HelpScreen) and not pilot.app.screen.job


def group_of(view: HookedView) -> JobGroup:
    assert view.info is not None
    return JobGroup(None, (JobInfo.of(view.pid, "/nonexistent.sock", view.info.hello),))


async def test_plain_gpumon_offers_the_hooked_jobs_and_attaches_to_the_picked_one() -> None:
    job = FakeJob(LIVE)
    opened: list[JobGroup] = []

    def open_job(group: JobGroup) -> FakeJob:
        opened.append(group)
        return job

    group = group_of(LIVE)
    app = GpumonApp(FakeSource(), jobs=[group], open_job=open_job)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, JobPicker)
        assert not app.query(JobPane)
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert opened == [group] and job.calls == ["start"]
        assert app.job is job
        assert "steps/s" in widget_text(app.query_one(JobPane))


async def test_escape_in_the_picker_keeps_the_plain_dashboard() -> None:
    app = GpumonApp(FakeSource(), jobs=[group_of(LIVE)], open_job=lambda group: FakeJob(LIVE))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, JobPicker)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, JobPicker)
        assert app.job is None and not app.query(JobPane)


async def test_the_energy_counter_is_read_often_only_once_a_job_is_followed() -> None:
    """The plain dashboard shows only the cumulative energy; a followed job's joules per sample need every read."""
    plain = EnergySource()
    async with GpumonApp(plain, jobs=[group_of(LIVE)], open_job=lambda group: FakeJob(LIVE)).run_test() as pilot:
        await pilot.pause()
        assert plain.energy_often == [False]
        await pilot.press("enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        assert plain.energy_often == [False, True]
    attached = EnergySource()
    async with GpumonApp(attached, job=FakeJob(LIVE)).run_test() as pilot:
        await pilot.pause()
        assert attached.energy_often == [True]
