"""The diagnosis covers its whole window at any step rate, not the last few hundred steps a view keeps."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gpumon import protocol
from gpumon.advisor.categories import HEALTHY, INPUT_BOUND
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import build_signals
from gpumon.jobs.client import JobClient
from gpumon.jobs.jobstate import RECENT_STEPS, Breakdown, JobState, StepPoint
from gpumon.jobs.step_sums import SUM_SECONDS
from tests.attach.attach_helpers import HOOKED_JOB, Job

RATE = 286
"""Steps per second, as the job it was found on ran."""
WALL_MS = 1000 / RATE
START = 1_800_000_000.0


def hello(pid: int = 4242) -> dict[str, Any]:
    return {"type": protocol.HELLO, "pid": pid, "started": START - 1, "argv": ["train.py"], "cuda": {}}


def fast_job_messages(seconds: float, data_ms_at: Any) -> Iterator[dict[str, Any]]:
    """Steps messages as the hook sends them (a batch every 0.1 s) for a job at RATE steps/s."""
    seq = 0
    batch: list[dict[str, Any]] = []
    t = START
    while t < START + seconds:
        seq += 1
        t = START + seq * WALL_MS / 1e3
        batch.append(
            {
                "seq": seq,
                "t": t,
                "wall_ms": WALL_MS,
                "data_ms": data_ms_at(t - START),
                "gpu_ms": None,
                "samples": 32,
                "source": "optimizer",
            }
        )
        if len(batch) == RATE // 10:
            yield {"type": protocol.STEPS, "t": t, "last_seq": seq, "records": batch, "dropped": 0}
            batch = []
    if batch:
        yield {"type": protocol.STEPS, "t": t, "last_seq": seq, "records": batch, "dropped": 0}


def fed(messages: Iterator[Mapping[str, Any]]) -> JobState:
    state = JobState(4242, clock=lambda: 0.0)
    state.apply(hello())
    for message in messages:
        state.apply(message)
    return state


def data_bound_then_not(offset: float) -> float:
    """Waits 80% of each step for data during the first 8 s, 5% afterwards."""
    return WALL_MS * (0.8 if offset < 8.0 else 0.05)


def test_a_fast_job_gets_the_share_of_its_whole_window() -> None:
    view = fed(fast_job_messages(16.0, data_bound_then_not)).view()
    assert len(view.steps) == RECENT_STEPS  # the records reach back 1.8 s: the second half only
    assert Breakdown.of(view.steps).data == pytest.approx(0.05)
    signals = build_signals([], view, start=START, end=START + 16.0)
    assert signals.step.data_share == pytest.approx(0.425, abs=0.01)  # (8 s at 80% + 8 s at 5%) / 16 s
    assert signals.step.steps == pytest.approx(16 * RATE, abs=2)
    assert signals.step.steps_per_s == pytest.approx(RATE, rel=0.01)
    assert signals.step.samples_per_step == pytest.approx(32)
    assert signals.step.step_ms == pytest.approx(WALL_MS)
    assert diagnose(signals).category == INPUT_BOUND


def test_a_window_inside_the_run_adds_up_only_its_own_steps() -> None:
    view = fed(fast_job_messages(16.0, data_bound_then_not)).view()
    second_half = build_signals([], view, start=START + 8.0, end=START + 16.0)
    assert second_half.step.data_share == pytest.approx(0.05, abs=0.01)
    assert diagnose(second_half).category == HEALTHY
    first_half = build_signals([], view, start=START + 0.5, end=START + 7.5)
    assert first_half.step.data_share == pytest.approx(0.8, abs=0.01)
    # The window cuts seconds in the middle: their steps are prorated.
    assert first_half.step.steps == pytest.approx(7 * RATE, abs=RATE * 0.02)


def test_a_slow_job_still_uses_its_exact_step_records() -> None:
    """Windows the view's records cover give the same figures as before (every record, no proration)."""
    messages = [
        {
            "type": protocol.STEPS,
            "t": START + i * 0.5,
            "last_seq": i,
            "dropped": 0,
            "records": [
                {
                    "seq": i,
                    "t": START + i * 0.5,
                    "wall_ms": 500.0,
                    "data_ms": 100.0 * (i % 3),
                    "gpu_ms": None,
                    "samples": 8,
                    "source": "optimizer",
                }
            ],
        }
        for i in range(1, 41)
    ]
    view = fed(iter(messages)).view()
    records = [StepPoint.from_record(m["records"][0]) for m in messages]
    window = [r for r in records if r is not None and START + 3.0 <= r.t <= START + 14.2]
    signals = build_signals([], view, start=START + 3.0, end=START + 14.2)
    assert signals.step.steps == len(window)
    assert signals.step.data_share == pytest.approx(Breakdown.of(window).data)


def test_the_sums_stay_bounded() -> None:
    state = JobState(1, clock=lambda: 0.0)
    for second in range(SUM_SECONDS + 500):
        state.apply(
            {
                "type": protocol.STEPS,
                "t": START + second,
                "last_seq": second + 1,
                "dropped": 0,
                "records": [{"seq": second + 1, "t": START + second + 0.5, "wall_ms": 1000.0, "data_ms": 1.0}],
            }
        )
    sums = state.view().step_sums
    assert len(sums) == SUM_SECONDS and sums[-1].second == int(START) + SUM_SECONDS + 499


def test_bad_step_figures_are_left_out_of_the_sums() -> None:
    state = JobState(1, clock=lambda: 0.0)
    state.apply(
        {
            "type": protocol.STEPS,
            "t": START,
            "last_seq": 3,
            "records": [
                {"seq": 1, "t": START, "wall_ms": float("nan"), "data_ms": 1.0},
                {"seq": 2, "t": START + 0.1, "wall_ms": -5.0, "data_ms": 1.0},
                {"seq": 3, "t": START + 0.2, "wall_ms": 10.0, "data_ms": 1.0},
            ],
        }
    )
    assert sum(second.steps for second in state.view().step_sums) == 1


# ---------------------------------------------------------------------------------------------
# A real hooked CPU job: DataLoader-bound for its first seconds, 10x faster data after.


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gpumon-window-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


def test_a_real_job_whose_data_gets_fast_is_judged_on_its_whole_run(sock_dir: str) -> None:
    job = Job(HOOKED_JOB, ["--seconds", "7", "--batch", "1", "--item-sleep-ms", "3", "--fast-after", "3.5"], sock_dir)
    received: list[Mapping[str, Any]] = []
    client = JobClient(job.pid, wait_for_socket=True)
    client.add_message_listener(received.append)
    client.start()
    try:
        assert job.proc.wait(60) == 0
        assert client.wait_ended(10)
    finally:
        client.stop()
        job.kill()
    records: dict[int, StepPoint] = {}
    for message in received:
        if message.get("type") == protocol.STEPS:
            for record in message.get("records") or ():
                step = StepPoint.from_record(record)
                if step is not None:
                    records[step.seq] = step
    every = sorted(records.values(), key=lambda step: step.seq)
    view = client.view()
    assert len(every) > 2 * RECENT_STEPS, "the fast half must outrun what a view keeps"
    start, end = every[0].t - every[0].wall_ms / 1e3, every[-1].t
    signals = build_signals([], view, start=start, end=end)
    whole, recent = Breakdown.of(every).data, Breakdown.of(view.steps).data
    # The premise: the kept steps read differently from the whole run, by more than the check below allows (on a
    # loaded 2-core machine the fast half's loader overhead keeps its data share near 0.75, the whole near 0.83).
    assert whole is not None and recent is not None and recent < whole - 0.05
    assert signals.step.data_share == pytest.approx(whole, abs=0.02)
    assert signals.step.steps == pytest.approx(len(every), abs=2)
