"""The measured GPU idle as the monitor reads it from the budgets: rates between two budgeted steps, the d2h copies'
idle, and the step model's input built from the signals."""

from __future__ import annotations

import pytest

from gpumon.advisor.signal_figures import BudgetFigures
from gpumon.jobs.budget import BudgetShares, CumulativeMark, CumulativeRates, StepTimeBudget


def test_the_idle_parts_of_the_collector_and_the_allocator_are_rates_between_two_budgeted_steps() -> None:
    first = CumulativeMark.from_budget(
        {
            "gc_ms_total": 100.0,
            "gc_idle_ms_total": 40.0,
            "empty_cache_ms_total": 10.0,
            "empty_cache_idle_ms_total": 5.0,
        },
        seq=10,
        t=1000.0,
    )
    last = CumulativeMark.from_budget(
        {
            "gc_ms_total": 400.0,
            "gc_idle_ms_total": 240.0,
            "empty_cache_ms_total": 510.0,
            "empty_cache_idle_ms_total": 305.0,
        },
        seq=110,
        t=1002.0,
    )
    rates = CumulativeRates.between(first, last)
    assert rates.gc_share == pytest.approx(0.15) and rates.gc_idle_share == pytest.approx(0.10)
    assert rates.empty_cache_share == pytest.approx(0.25) and rates.empty_cache_idle_share == pytest.approx(0.15)


def test_an_older_hook_without_idle_totals_gives_none() -> None:
    first = CumulativeMark.from_budget({"gc_ms_total": 1.0}, seq=1, t=1.0)
    last = CumulativeMark.from_budget({"gc_ms_total": 2.0}, seq=2, t=2.0)
    assert CumulativeRates.between(first, last).gc_idle_share is None


def test_device_to_host_idle_is_a_share_of_the_budgeted_steps() -> None:
    steps = [
        StepTimeBudget.from_record({"d2h_ms": 6.0, "d2h_idle_ms": 4.0, "rest_ms": 14.0}),
        StepTimeBudget.from_record({"d2h_ms": 2.0, "d2h_idle_ms": 1.0, "rest_ms": 18.0}),
    ]
    shares = BudgetShares.of([step for step in steps if step is not None])
    assert shares.d2h == pytest.approx(8.0 / 40.0) and shares.d2h_idle == pytest.approx(5.0 / 40.0)
    assert shares.step_ms == pytest.approx(20.0)  # the budgeted steps' mean, to set against the window's
    assert BudgetShares().step_ms is None


def test_the_step_model_takes_what_was_measured_and_zero_for_what_was_not() -> None:
    measured = BudgetFigures(
        gc_share=0.2, gc_idle_share=None, empty_cache_idle_share=0.1, optimizer_on_cpu=True
    ).measured_host_time()
    assert measured.gc == 0.2 and measured.gc_idle == 0.0 and measured.alloc_idle == 0.1
    assert measured.optimizer_on_cpu and measured.known_idle == pytest.approx(0.1)
    assert not BudgetFigures(optimizer_on_cpu=None).measured_host_time().optimizer_on_cpu
