"""The job pane on its own, fed from a real hooked CPU run (tests/fixtures/job-cpu-run.jsonl) and a py-spy estimate."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from textual.app import App, ComposeResult
from tui_support import widget_text

from gpumon.jobs.jobstate import HookedView, JobState, RankSummary, replay_messages
from gpumon.jobs.pyspy.estimate import EstimateView
from gpumon.protocol import activity
from gpumon.tui.job_pane import JobPane, job_lines, stacked_bar, step_model_line
from tests.jobs.host_messages import hosted_view

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "job-cpu-run.jsonl"


def recorded_messages() -> list[dict]:
    return [json.loads(line) for line in RECORDING.read_text().splitlines()]


def recorded_view(upto: int | None = None) -> HookedView:
    """The job as the monitor saw it after the first `upto` messages (all of them: after its exit)."""
    return replay_messages(recorded_messages()[:upto]).view()


class PaneHost(App[None]):
    CSS = "JobPane { border-top: solid $primary; }"

    def __init__(self, view: HookedView | EstimateView, max_lines: int = 12) -> None:
        super().__init__()
        self.view_to_show = view
        self.max_lines = max_lines

    def compose(self) -> ComposeResult:
        pane = JobPane(id="job")
        pane.max_lines = self.max_lines
        yield pane

    def on_mount(self) -> None:
        self.query_one(JobPane).show(self.view_to_show)


def lines_text(view: HookedView | EstimateView, width: int = 100, max_lines: int = 12) -> str:
    return "\n".join(line.plain for line in job_lines(view, width, max_lines))


def test_stacked_bar_splits_its_cells_by_share() -> None:
    text = stacked_bar([(0.5, "yellow"), (0.25, "green"), (None, "magenta")], 8)
    assert text.plain == "██████··"
    assert [(span.start, span.end, span.style) for span in text.spans][:2] == [(0, 4, "yellow"), (4, 6, "green")]


async def test_a_live_job_shows_its_breakdown_rate_and_loader() -> None:
    messages = recorded_messages()
    live = replay_messages(messages[: len(messages) // 2]).view()
    async with PaneHost(live).run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        text = widget_text(pilot.app.query_one(JobPane))
    assert f"Job {live.pid}" in text and "hooked_train.py" in text and "optimizer steps" in text
    assert "ENDED" not in text and "job ended" not in text
    breakdown = live.stats.breakdown
    assert breakdown.data is not None and breakdown.rest is not None
    assert f"data {breakdown.data * 100:.0f}%" in text and f"other {breakdown.rest * 100:.0f}%" in text
    assert "(no GPU timing)" in text  # CPU torch: no GPU share is invented
    assert f"{live.stats.steps_per_s:.0f} steps/s" in text or "k steps/s" in text
    assert "samples/s" in text
    assert "SleepyDataset · batch 8 · workers 2 · prefetch 2 · pin off · persist on" in text
    assert "Memory  N/A (the job has not initialized CUDA)" in text
    assert "cudnn.benchmark off" in text


async def test_the_ended_job_says_so_and_keeps_its_history() -> None:
    ended = recorded_view()
    assert ended.ended
    async with PaneHost(ended).run_test(size=(100, 20)) as pilot:
        await pilot.pause()
        pane = pilot.app.query_one(JobPane)
        text = widget_text(pane)
    assert "ENDED" in str(pane.border_title)
    assert "job ended the process exited · history kept" in text
    # The sparklines still hold every second of the run.
    data_line = next(line for line in text.splitlines() if line.startswith("Data"))
    assert sum(ch in "▁▂▃▄▅▆▇█" for ch in data_line) == len(ended.timeline)


def test_a_job_waiting_to_start_and_a_silent_job_are_named() -> None:
    waiting = JobState(42)
    waiting.waiting = "waiting for `python train.py` to start training"
    assert lines_text(waiting.view()).startswith("waiting for `python train.py` to start training …")
    live = recorded_view(len(recorded_messages()) // 2)
    assert "no data from the job for 12 s" in lines_text(replace(live, silent_s=12.0))


def test_ranks_are_listed_and_the_straggler_highlighted() -> None:
    live = recorded_view(len(recorded_messages()) // 2)
    ranks = (
        RankSummary(rank=0, pid=10, steps_per_s=50, wall_ms=20.0, data_ms=1.0, gpu_ms=None, ended=False),
        RankSummary(rank=1, pid=11, steps_per_s=20, wall_ms=50.0, data_ms=1.0, gpu_ms=None, ended=False),
    )
    lines = job_lines(replace(live, ranks=ranks, straggler=11), 100, 14)
    (rank_line,) = [line for line in lines if line.plain.startswith("Ranks")]
    assert "r0 20.0 ms" in rank_line.plain and "r1 50.0 ms ◀ straggler" in rank_line.plain
    straggler_start = rank_line.plain.index("r1 50.0 ms")
    assert any(span.start == straggler_start and "red" in str(span.style) for span in rank_line.spans)


def test_short_panes_fold_the_share_sparklines_into_one_line() -> None:
    live = recorded_view(len(recorded_messages()) // 2)
    tall = job_lines(live, 100, 12)
    short = job_lines(live, 100, 6)
    assert [line.plain.split()[0] for line in tall][:4] == ["Step", "Data", "Other", "Rate"]
    assert [line.plain.split()[0] for line in short][:3] == ["Step", "Shares", "Rate"]
    assert len(short) == 6  # step, shares, rate, memory, loader, math


async def test_the_py_spy_estimate_is_labelled_as_one() -> None:
    estimate = EstimateView(
        pid=77,
        command="/usr/bin/python3 /home/u/train.py --epochs 3",
        rounds=4,
        counts={"data_wait": 160, "forward": 30, "backward": 8, "elsewhere": 2},
        recent={"data_wait": 80, "forward": 15, "backward": 4, "elsewhere": 1},
        timeline=({"data_wait": 0.8, "forward": 0.2}, {"data_wait": 0.8, "forward": 0.15, "backward": 0.05}),
        hot_frames={"data_wait": "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1505)"},
    )
    async with PaneHost(estimate).run_test(size=(100, 16)) as pilot:
        await pilot.pause()
        pane = pilot.app.query_one(JobPane)
        text = widget_text(pane)
    assert str(pane.border_title) == "Job 77 · python3 train.py --epochs 3 · estimate (py-spy, no hook)"
    assert "estimate (py-spy, no hook) · 200 main-thread samples at 50 Hz in 4 s" in text
    assert "waiting on DataLoader" in text and " 80% " in text
    assert "most in _MultiProcessingDataLoaderIter._next_data" in text
    ended = replace(estimate, ended=True, end_reason="the process exited")
    assert "sampling ended: the process exited · estimate kept" in lines_text(ended)


# 20 samples a second: the main thread in its own Python 12 of them (the GPU idle), launching 8 (the GPU busy at 6).
PER_SECOND = {activity.CPU: (12, 0, 0), activity.FORWARD: (2, 6, 0)}


def test_the_step_model_line_splits_the_last_ten_seconds_by_owner() -> None:
    view = hosted_view(PER_SECOND)
    line = step_model_line(view, 100)
    assert line is not None
    assert line.plain == "Time    " + "█" * 40 + " GPU 30% | launch 10% | cpu 60%"
    # The bar's cells in each owner's colour, in the owners' order: GPU 30%, launch 10%, cpu 60% of the 40.
    cells = [(span.end - span.start, span.style) for span in line.spans if span.end <= 48]
    assert cells == [(12, "green"), (4, "blue"), (24, "magenta")]
    # GPU-Util where given is GPU busy: the idle owners keep their proportions in what is left.
    nvml = step_model_line(view, 100, nvml_busy=0.5)
    assert nvml is not None and nvml.plain.endswith(" GPU 50% | launch 7% | cpu 43%")


def test_the_step_model_line_is_in_the_pane_only_with_the_samplers_counts() -> None:
    without = recorded_view()
    assert step_model_line(without, 100) is None
    assert not any(line.startswith("Time ") for line in lines_text(without).splitlines())
    lines = lines_text(hosted_view(PER_SECOND)).splitlines()
    step = next(index for index, line in enumerate(lines) if line.startswith("Step "))
    assert lines[step + 1].startswith("Time    ") and lines[step + 1].endswith("cpu 60%")
    # A pane too short for everything keeps the step lines.
    short = lines_text(hosted_view(PER_SECOND), max_lines=4).splitlines()
    assert [line.split(" ")[0] for line in short[:3]] == ["job", "Step", "Time"]
