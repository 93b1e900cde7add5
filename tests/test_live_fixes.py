"""benchmarks/live_fixes.py: an owner's verdict read from the knob's decision, the loader's scores, the table from a
part cut after its live run, and the GC-churn job keeping the collector at work (a bounded history would not)."""

from __future__ import annotations

import gc

import pytest
import torch

from benchmarks.live_fixes import loader_scores, markdown, owner_verdict
from benchmarks.scenarios.live.owner_churn import Job
from gpumon.advisor.measure import INCONCLUSIVE, NO_WIN, SLOWER, WIN, Decision, Measurement
from gpumon.advisor.results import FAILED, KIND_LIVE, OK, VariantResult


def tried(outcome: str | None, status: str = OK) -> VariantResult:
    result = VariantResult(
        label="gc_freeze off -> on",
        change={"gc_freeze": True},
        knobs={"gc_freeze": True},
        kind=KIND_LIVE,
        status=status,
        reason="the job refused it" if status != OK else "",
        measurement=Measurement(rates=(10.0, 10.5)) if status == OK else None,
    )
    return result.with_decision(Decision(outcome, 0.2, 0.05)) if outcome is not None else result


@pytest.mark.parametrize(
    ("outcome", "verdict"),
    [(WIN, "proved"), (NO_WIN, "refuted"), (SLOWER, "refuted"), (INCONCLUSIVE, "inconclusive")],
)
def test_the_owner_is_proved_by_a_kept_win_and_refuted_only_by_a_decided_loss(outcome: str, verdict: str) -> None:
    assert owner_verdict(tried(outcome)) == verdict


def test_an_owner_knob_not_tried_or_not_measured_is_neither_proved_nor_refuted() -> None:
    assert owner_verdict(None) == "not tried"
    assert owner_verdict(tried(None, status=FAILED)) == "failed"


def test_the_loader_scores_hold_the_live_gain_to_the_trial_and_a_cut_climb_to_no_time() -> None:
    trial = {"speedup": 6.0, "kept": {"num_workers": 14}}
    scores = loader_scores({"speedup": 5.4, "best_rate": 540.0, "wall_s": 95.0, "cut": False}, trial)
    assert scores["gain_ratio"] == 0.9 and scores["gain_ratio_met"] and scores["live_under_3_min"]
    cut = loader_scores({"speedup": 3.0, "wall_s": 120.0, "cut": True}, trial)
    assert cut["gain_ratio_met"] is False and cut["live_under_3_min"] is False
    nothing = loader_scores({"speedup": 1.0, "wall_s": 30.0, "cut": False}, {"speedup": 1.0, "kept": {}})
    assert nothing["gain_ratio"] == 1.0 and nothing["gain_ratio_met"] is None, "no trial gain: nothing to meet"
    failed = loader_scores({"error": "pid 1 has no gpumon hook", "wall_s": 6.0}, {})
    assert failed["gain_ratio"] is None and failed["live_under_3_min"] is None


def test_the_table_shows_a_loader_part_saved_before_its_trial_runs() -> None:
    meta = {"device": "NVIDIA H200 x1", "cores": 16, "date": "2026-11-29", "commit": "abc", "commands": ["python x"]}
    live = {"speedup": 5.0, "kept": {"num_workers": 14}, "wall_s": 90.0, "cut": False, "finding": "input_bound"}
    table = markdown({"meta": meta, "parts": {"loader": {"workers": 2, "live": live}}})
    row = next(line for line in table.splitlines() if "live (" in line)
    assert "input_bound" in row and "num_workers=14" in row and "5.00x" in row and "trial -" in row


def test_the_gc_churn_job_keeps_the_collector_running_until_removed() -> None:
    job = Job("gc_churn", torch.device("cpu"), tiny=True)
    try:

        def collections(steps: int) -> int:
            before = gc.get_stats()[0]["collections"]
            for _ in range(steps):
                job.step()
            return gc.get_stats()[0]["collections"] - before

        assert collections(5) > 5, "records made and dropped still leave young collections every step"
        job.set_present(False)
        assert not gc.isenabled() and collections(5) == 0
    finally:
        job.set_present(True)
    assert gc.isenabled() and gc.get_freeze_count() == 0
