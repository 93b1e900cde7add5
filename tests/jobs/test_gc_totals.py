"""The collector's totals from the hook's state: points a second apart, and its rates over a window, which the
advisor takes where no step record (or no budgeted one) reached it inside the window (held-out seed 1081 on an H200:
the collector held 83% of the step by ablation, and no step record arrived in the 4-s diagnosis)."""

from __future__ import annotations

import pytest

from gpumon import protocol
from gpumon.advisor.signals import build_signals
from gpumon.jobs.gc_totals import GcPoint, gc_rates
from gpumon.jobs.jobstate import replay_messages


def state(t: float, ms: float, passes: int, idle_ms: float = 0.0, gen2: int = 0) -> dict[str, object]:
    gc = {"ms_total": ms, "idle_ms_total": idle_ms, "passes_total": passes, "gen2_total": gen2, "collected_total": 0}
    return {"type": protocol.STATE, "t": t, "last_seq": 0, "gc": gc}


def test_points_come_from_the_state_and_bad_ones_are_none() -> None:
    assert GcPoint.from_state(state(5.0, 12.5, 3)["gc"], 5.0) == GcPoint(5.0, 12.5, 0.0, 3, 0)
    assert GcPoint.from_state(None, 5.0) is None
    assert GcPoint.from_state({"ms_total": "x", "passes_total": 1}, 5.0) is None


def test_rates_are_the_difference_of_the_window_s_first_and_last_points() -> None:
    points = [GcPoint(100.0 + i, 600.0 * i, 100.0 * i, 950 * i, 2 * i) for i in range(6)]
    rates = gc_rates(points, 101.0, 104.5)  # points at 101..104
    assert rates is not None
    assert rates.share == pytest.approx(0.6) and rates.idle_share == pytest.approx(0.1)
    assert rates.passes_per_s == pytest.approx(950) and rates.gen2_per_s == pytest.approx(2)
    assert rates.ms_per_pass == pytest.approx(600 / 950)
    assert gc_rates(points, 101.0, 101.5) is None, "one point is no rate"
    restarted = [GcPoint(100.0, 900.0, 0.0, 900, 0), GcPoint(102.0, 10.0, 0.0, 10, 0)]
    assert gc_rates(restarted, None, None) is None, "totals that went back: the hook started again"


def test_a_window_without_step_records_takes_the_collector_from_the_state() -> None:
    messages = [state(1000.0 + i, 800.0 * i, 500 * i, idle_ms=700.0 * i) for i in range(6)]
    view = replay_messages(messages).view()
    assert len(view.gc_points) == 6 and not view.steps
    signals = build_signals([], view, start=1000.5, end=1005.5)
    assert signals.budget.gc_share == pytest.approx(0.8) and signals.budget.gc_idle_share == pytest.approx(0.7)
    assert signals.budget.gc_passes_per_s == pytest.approx(500)
    assert signals.budget.measured_host_time().gc == pytest.approx(0.8)
