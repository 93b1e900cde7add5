"""The monitor's window figures of the hook's host costs, from hand-made step records: the collector's and the
allocator's rates between the first and last budgeted steps, device->host copies and the optimizer over the budgeted
steps, and whether an optimizer lives on the CPU of a CUDA job."""

from __future__ import annotations

from typing import Any

import pytest

from gpumon import protocol
from gpumon.jobs.budget import PARTS, CumulativeMark, CumulativeRates
from gpumon.jobs.jobstate import replay_messages
from gpumon.jobs.step_sums import StepSumsLog, window_sums


def budget(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "data_worker_ms": 1.0,
        "data_collate_ms": 0.0,
        "h2d_ms": 0.0,
        "d2h_ms": 2.0,
        "d2h_bytes": 4096,
        "d2h_copies": 1,
        "sync_wait_ms": 1.0,
        "syncs": 2,
        "rest_ms": 6.0,
        "optimizer_ms": 3.0,
        "empty_cache_ms": 0.5,
        "empty_cache_calls": 1,
    }
    return {**base, **fields}


def record(seq: int, t: float, budget_fields: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": seq, "t": t, "wall_ms": 10.0, "data_ms": 1.0, "gpu_ms": None, "source": "optimizer"}
    if budget_fields is not None:
        out["budget"] = budget_fields
    return out


def totals(
    gc_ms: float, passes: int, gen2: int, cache_ms: float, cache_calls: int, allocs: int | None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "gc_ms_total": gc_ms,
        "gc_passes_total": passes,
        "gc_gen2_total": gen2,
        "gc_collected_total": 0,
        "empty_cache_ms_total": cache_ms,
        "empty_cache_calls_total": cache_calls,
    }
    if allocs is not None:
        out["device_allocs_total"] = allocs
        out["device_frees_total"] = allocs
    return out


def steps_message(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": protocol.STEPS, "records": records}


def job_records() -> list[dict[str, Any]]:
    """100 steps of 10 ms from t=1000.01; budgeted at 20 and 100 (0.8 s apart): 40 ms of collection in 10 passes
    (2 full), empty_cache 80 times for 40 ms, 160 cudaMallocs between them."""
    records = [record(seq, 1000.0 + seq * 0.01) for seq in range(1, 101)]
    records[19] = record(20, 1000.2, budget(**totals(10.0, 5, 1, 10.0, 19, 1000)))
    records[99] = record(100, 1001.0, budget(**totals(50.0, 15, 3, 50.0, 99, 1160)))
    return records


def test_the_collector_and_allocator_rates_come_from_the_first_and_last_budgeted_steps() -> None:
    view = replay_messages([steps_message(job_records())], pid=1).view()
    shares = view.budget
    assert shares.steps == 2
    assert shares.gc_share == pytest.approx(40.0 / 800.0)
    assert shares.gc_passes_per_s == pytest.approx(10 / 0.8)
    assert shares.gc_gen2_per_s == pytest.approx(2 / 0.8)
    assert shares.gc_ms_per_pass == pytest.approx(4.0)
    assert shares.empty_cache_share == pytest.approx(40.0 / 800.0)
    assert shares.empty_cache_per_step == pytest.approx(1.0)
    assert shares.device_allocs_per_step == pytest.approx(2.0)
    # The parts of the budgeted steps, d2h among them, still add up to 1; the optimizer stands beside them.
    assert sum(getattr(shares, part) for part in PARTS) == pytest.approx(1.0)
    assert shares.d2h == pytest.approx(0.2) and shares.d2h_bytes_per_step == 4096
    assert shares.optimizer_share == pytest.approx(0.3)
    assert shares.syncs_per_step == 2


def test_the_per_second_sums_carry_the_same_figures_over_a_window_the_records_no_longer_reach() -> None:
    view = replay_messages([steps_message(job_records())], pid=1).view()
    sums = window_sums(view.step_sums, None, None)
    assert sums.budget_steps == 2 and sums.budget_wall_ms == pytest.approx(20.0)
    assert sums.d2h_share == pytest.approx(0.2) and sums.d2h_bytes_per_step == pytest.approx(4096)
    assert sums.optimizer_share == pytest.approx(0.3)
    assert sums.first_mark is not None and sums.first_mark.seq == 20
    assert sums.rates == CumulativeRates.between(sums.first_mark, sums.last_mark)
    assert sums.rates.gc_share == pytest.approx(0.05) and sums.rates.device_allocs_per_step == pytest.approx(2.0)
    # A window that starts after the first budgeted step has only one mark: no rates.
    later = window_sums(view.step_sums, 1000.5, None)
    assert later.first_mark is later.last_mark and later.rates == CumulativeRates()


def test_marks_are_kept_per_second_and_the_window_picks_its_earliest_and_latest() -> None:
    records = job_records()
    records[49] = record(50, 1000.5, budget(**totals(30.0, 10, 2, 30.0, 49, 1080)))
    view = replay_messages([steps_message(records)], pid=1).view()
    log = StepSumsLog()
    for step in view.steps:
        log.add(step.t, step.wall_ms, step.data_ms, step.gpu_busy_ms, step.samples, step.budget)
    kept = [(s.second, s.first_mark, s.last_mark) for s in log.seconds()]
    assert [(second, first and first.seq, last and last.seq) for second, first, last in kept] == [
        (1000, 20, 50),
        (1001, 100, 100),
    ]
    inside = window_sums(log.seconds(), 1000.3, 1000.9)  # only the step at 50 is budgeted within
    assert inside.first_mark is not None and inside.first_mark.seq == 50 and inside.last_mark is inside.first_mark
    whole = window_sums(log.seconds(), None, None)
    assert (whole.first_mark and whole.first_mark.seq, whole.last_mark and whole.last_mark.seq) == (20, 100)


def test_without_totals_or_with_totals_that_went_back_there_are_no_rates() -> None:
    old_hook = [record(4, 1000.04, budget()), record(8, 1000.08, budget())]
    shares = replay_messages([steps_message(old_hook)], pid=1).view().budget
    assert shares.steps == 2 and shares.gc_share is None and shares.device_allocs_per_step is None
    assert shares.empty_cache_per_step is None
    first = CumulativeMark(seq=4, t=1.0, gc_ms=50.0, gc_passes=9)
    restarted = CumulativeMark(seq=8, t=2.0, gc_ms=1.0, gc_passes=1)
    assert CumulativeRates.between(first, restarted).gc_share is None
    assert CumulativeRates.between(restarted, first) == CumulativeRates()  # out of order


def test_a_single_budgeted_step_gives_its_own_empty_cache_figures() -> None:
    one = [record(16, 1000.16, budget(**totals(1.0, 1, 0, 0.5, 16, None)))]
    shares = replay_messages([steps_message(one)], pid=1).view().budget
    assert shares.gc_share is None
    assert shares.empty_cache_per_step == 1.0 and shares.empty_cache_share == pytest.approx(0.05)


def state(initialized: bool, optimizers: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "type": protocol.STATE,
        "t": 1000.0,
        "cuda": {"initialized": initialized, "devices": []},
        "optimizers": optimizers,
        "empty_cache_sites": [{"file": "/job/train.py", "line": 42, "count": 7}],
    }


@pytest.mark.parametrize(
    ("initialized", "devices", "on_cpu"),
    [
        (True, ["cpu"], True),
        (True, ["cuda", "mixed"], True),
        (True, ["cuda"], False),
        (False, ["cpu"], False),
        (True, [], None),
    ],
)
def test_an_optimizer_on_the_cpu_of_a_cuda_job(initialized: bool, devices: list[str], on_cpu: bool | None) -> None:
    optimizers = [{"class": "AdamW", "params_device": device} for device in devices]
    view = replay_messages([state(initialized, optimizers)], pid=1).view()
    assert view.optimizer_on_cpu is on_cpu
    assert view.empty_cache_sites == ("/job/train.py:42 (7)",)


def test_an_older_hooks_state_has_no_optimizers_and_no_sites() -> None:
    view = replay_messages([{"type": protocol.STATE, "t": 1.0}], pid=1).view()
    assert view.optimizer_on_cpu is None and view.optimizers == [] and view.empty_cache_sites == ()
