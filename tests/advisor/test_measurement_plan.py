"""One measurement plan for trial and live runs: the live runner on a trial measures as the trials do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpumon.advisor.measure import DIAGNOSIS_STEPS, MeasurementPlan, SnapshotLog
from gpumon.advisor.trial import TrialRunner
from gpumon.jobs.launch import LaunchedJob


def test_a_live_change_on_a_trial_keeps_the_trials_windows_with_its_own_warm_up() -> None:
    runner = TrialRunner(
        ["python", "train.py"],
        launcher=LaunchedJob,
        log=SnapshotLog(),
        warmup_s=7.0,
        window_s=2.5,
        repeats=5,
        min_repeats=2,
        live_warmup_s=0.5,
    )
    assert runner.plan == MeasurementPlan(warmup_s=7.0, window_s=2.5, repeats=5, min_repeats=2, count_syncs=True)
    assert runner.live_plan() == MeasurementPlan(
        warmup_s=0.5, window_s=2.5, repeats=5, min_repeats=2, count_syncs=False
    )


def test_the_sync_count_is_asked_with_the_plans_timeout_and_is_optional() -> None:
    asked: list[tuple[int, float]] = []

    def diagnose(steps: int, timeout: float) -> Mapping[str, Any]:
        asked.append((steps, timeout))
        return {"available": True}

    plan = MeasurementPlan(warmup_s=1.0, window_s=5.0)
    assert plan.sync_count(diagnose) == {"available": True}
    assert asked == [(DIAGNOSIS_STEPS, 15.0)]

    def refused(steps: int, timeout: float) -> Mapping[str, Any]:
        raise TimeoutError("the job did not answer")

    assert plan.sync_count(refused) is None
