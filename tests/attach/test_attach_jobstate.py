"""JobState: the breakdown arithmetic, the per-second timeline, duplicate backlogs, and a real recorded run replayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpumon import protocol
from gpumon.jobs.jobstate import Breakdown, JobState, StepPoint, replay_messages

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "job-cpu-run.jsonl"


def record(seq: int, t: float, wall: float = 10.0, data: float = 2.0, gpu: float | None = None) -> dict[str, Any]:
    return {"seq": seq, "t": t, "wall_ms": wall, "data_ms": data, "gpu_ms": gpu, "samples": 4, "source": "optimizer"}


def steps(*records: dict[str, Any], t: float | None = None) -> dict[str, Any]:
    return {
        "type": "steps",
        "t": t if t is not None else records[-1]["t"],
        "records": list(records),
        "last_seq": records[-1]["seq"] if records else 0,
    }


def shares(points: list[StepPoint]) -> tuple[float | None, ...]:
    breakdown = Breakdown.of(points)
    return (breakdown.data, breakdown.gpu, breakdown.rest)


def test_breakdown_splits_wall_time_into_data_gpu_and_the_rest() -> None:
    # 10 ms steps: 2 ms waiting for data, 5 ms of GPU work, 3 ms of host time with the GPU idle.
    step = StepPoint(seq=1, t=0.0, wall_ms=10.0, data_ms=2.0, gpu_ms=5.0, samples=4, source="optimizer")
    assert step.rest_ms == pytest.approx(3.0)
    assert shares([step]) == pytest.approx((0.2, 0.5, 0.3))
    # GPU time that overlaps the data wait (the GPU runs ahead) is not counted twice.
    overlapping = StepPoint(seq=2, t=0.0, wall_ms=10.0, data_ms=6.0, gpu_ms=9.0, samples=4, source="optimizer")
    assert overlapping.rest_ms == 0.0
    assert shares([overlapping]) == pytest.approx((0.6, 0.4, 0.0))
    # Without GPU timing the rest is everything but the data wait.
    untimed = StepPoint(seq=3, t=0.0, wall_ms=10.0, data_ms=2.0, gpu_ms=None, samples=4, source="optimizer")
    assert Breakdown.of([untimed]).gpu is None
    assert Breakdown.of([untimed]).rest == pytest.approx(0.8)


def test_timeline_has_one_point_per_second_and_zero_steps_while_stalled() -> None:
    state = JobState(1, clock=lambda: 0.0)
    state.apply(steps(record(1, 100.2), record(2, 100.7), record(3, 101.1)))
    # Heartbeats with no new steps: second 101 closes once the clock is past 102.5; 102 and 103 had no steps.
    state.apply({"type": "steps", "t": 104.6, "records": [], "last_seq": 3})
    timeline = state.view().timeline
    assert [(p.t, p.steps) for p in timeline] == [(100.0, 2), (101.0, 1), (102.0, 0), (103.0, 0)]
    assert timeline[0].samples_per_s == 8 and timeline[2].breakdown.data is None


def test_a_resent_backlog_is_not_counted_twice_and_gaps_are_dropped_records() -> None:
    state = JobState(1, clock=lambda: 0.0)
    state.apply(steps(record(1, 10.0), record(2, 10.1)))
    state.apply(steps(record(1, 10.0), record(2, 10.1), record(3, 10.2)))
    state.apply(steps(record(6, 10.5)))
    view = state.view()
    assert [s.seq for s in view.steps] == [1, 2, 3, 6]
    assert view.dropped == 2


def test_rolling_stats_cover_the_last_seconds() -> None:
    state = JobState(1, clock=lambda: 0.0)
    # 20 steps of 100 ms ending at t=0.1..2.0, then 500 steps of 10 ms ending at t=2.01..7.0.
    old = [record(i, i * 0.1, wall=100.0, data=50.0) for i in range(1, 21)]
    new = [record(20 + i, 2.0 + i * 0.01, wall=10.0, data=1.0) for i in range(1, 501)]
    state.apply(steps(*old, *new))
    stats = state.view().stats
    assert stats.steps == 500 + 1  # the steps that ended in the 5 s up to the last one: from t=2.0 on
    assert stats.steps_per_s == pytest.approx(501 / 5.0)
    assert stats.wall_ms == pytest.approx((100 + 500 * 10) / 501)
    assert stats.breakdown.data == pytest.approx((50 + 500 * 1) / (100 + 500 * 10))


def test_bye_ends_the_state_and_keeps_what_it_had() -> None:
    state = JobState(1, clock=lambda: 0.0)
    state.apply(steps(record(1, 10.0)))
    state.apply({"type": protocol.BYE, "reason": "exit", "last_seq": 1})
    state.end("connection closed")  # the socket closing after the bye does not change the reason
    view = state.view()
    assert view.ended and view.end_reason == "exit" and len(view.steps) == 1 and len(view.timeline) == 1


def test_the_recorded_cpu_run_replays_into_what_its_loop_did() -> None:
    messages = [json.loads(line) for line in RECORDING.read_text().splitlines()]
    assert messages[0]["type"] == protocol.HELLO and messages[-1]["type"] == protocol.BYE
    view = replay_messages(messages).view()
    assert view.ended and view.end_reason == "exit"
    assert view.info is not None and view.info.argv[0].endswith("hooked_train.py")
    (loader,) = view.dataloaders
    assert loader["num_workers"] == 2 and view.worker_pids == loader["worker_pids"] and len(view.worker_pids) == 2
    # The run's data got 10x faster after 5 s: the early seconds wait on data far more than the late ones.
    busy = [p for p in view.timeline if p.steps]
    assert busy[1].breakdown.data is not None and busy[-2].breakdown.data is not None
    assert busy[1].breakdown.data > 0.9 > busy[-2].breakdown.data
    assert busy[-2].steps > 3 * busy[1].steps
    assert sum(p.steps for p in view.timeline) == view.last_seq
