"""The hook's step schedule (gpumon.hook.schedule) as a table: boundary number, settings and recent step times in,
the boundary's plan out. No hook, no thread, no torch."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpumon.hook.budget import BUDGET_SLOW_STEP_S
from gpumon.hook.schedule import (
    GPU_TIMING_MAX_STRIDE,
    GPU_TIMING_SLOW_STEP_S,
    NEVER,
    NO_CANDIDATE,
    BoundaryPlan,
    Schedule,
)

DEFAULT = Schedule()
EXPLICIT = Schedule(budget_min_gap_s=0.0, gpu_min_gap_s=0.0)
"""GPUMON_HOOK_BUDGET_EVERY=16 and GPUMON_HOOK_GPU_TIMING=8: exactly one in N, no gaps."""


def plan(seq: int, schedule: Schedule = DEFAULT, **given: Any) -> BoundaryPlan:
    """Boundary `seq`'s plan: a 1 ms step, nothing budgeted yet, no diagnosis, GPU timing off, the device known,
    unless `given` says otherwise."""
    inputs: dict[str, Any] = {
        "wall": 0.001,
        "since_budgeted": math.inf,
        "diagnosing": False,
        "timing": False,
        "next_timed": 0,
        "cuda_known": True,
    }
    inputs.update(given)
    return schedule.at(seq, **inputs)


# (boundary, schedule, inputs, the plan's fields expected)
CASES: list[tuple[str, int, Schedule, dict[str, Any], dict[str, Any]]] = [
    # Budget: one step in budget_every, at least budget_min_gap_s apart; every step of a diagnosis window.
    ("budget_on_schedule", 15, DEFAULT, {}, {"budget": True, "budget_on_schedule": True}),
    ("budget_within_gap", 15, DEFAULT, {"since_budgeted": 0.1}, {"budget": False, "budget_on_schedule": False}),
    ("budget_past_gap", 15, DEFAULT, {"since_budgeted": 0.3}, {"budget": True}),
    ("budget_no_gap_explicit", 15, EXPLICIT, {"since_budgeted": 0.001}, {"budget": True}),
    ("budget_off_schedule", 16, DEFAULT, {}, {"budget": False}),
    ("budget_diagnosing", 16, DEFAULT, {"diagnosing": True}, {"budget": True, "budget_on_schedule": False}),
    ("budget_off", 15, Schedule(budget_every=0), {"diagnosing": True}, {"budget": False}),
    # After a slow step the next is budgeted whatever its number (a job stepping a few times a second would see one
    # budgeted step every few seconds), still the gap apart; an explicit one-in-N stays exactly that.
    ("budget_after_slow_step", 16, DEFAULT, {"wall": 0.2, "since_budgeted": 0.3}, {"budget": True}),
    ("budget_after_slow_step_gap", 16, DEFAULT, {"wall": 0.2, "since_budgeted": 0.2}, {"budget": False}),
    ("budget_after_short_step", 16, DEFAULT, {"wall": 0.04, "since_budgeted": 9.0}, {"budget": False}),
    ("budget_slow_step_explicit", 16, EXPLICIT, {"wall": 0.2, "since_budgeted": 9.0}, {"budget": False}),
    ("quiet_below_slow_budget", 16, DEFAULT, {}, {"quiet_below_s": BUDGET_SLOW_STEP_S}),
    ("quiet_below_explicit", 16, EXPLICIT, {}, {"quiet_below_s": math.inf}),
    # GPU timing: its regular schedule (a gap's worth of the last step's time, or one in N), slow and budgeted steps.
    ("gpu_off", 15, DEFAULT, {"next_timed": 16}, {"gpu_time": False, "quiet_below_s": BUDGET_SLOW_STEP_S}),
    (
        "gpu_on_schedule_gap",
        15,
        DEFAULT,
        {"timing": True, "next_timed": 16, "wall": 0.002},
        {"gpu_time": True, "next_timed": 16 + 50, "quiet_below_s": GPU_TIMING_SLOW_STEP_S},
    ),
    (
        "gpu_gap_slow_steps_every_8",
        15,
        DEFAULT,
        {"timing": True, "next_timed": 16, "wall": 0.015},
        {"gpu_time": True, "next_timed": 24},
    ),
    (
        "gpu_gap_zero_wall",
        15,
        DEFAULT,
        {"timing": True, "next_timed": 16, "wall": 0.0},
        {"gpu_time": True, "next_timed": 16 + GPU_TIMING_MAX_STRIDE},
    ),
    ("gpu_explicit_n", 15, EXPLICIT, {"timing": True, "next_timed": 16}, {"gpu_time": True, "next_timed": 24}),
    ("gpu_late_catches_up", 20, EXPLICIT, {"timing": True, "next_timed": 16}, {"gpu_time": True, "next_timed": 24}),
    ("gpu_not_due", 14, DEFAULT, {"timing": True, "next_timed": 16}, {"gpu_time": False, "next_timed": 16}),
    ("gpu_after_slow_step", 14, DEFAULT, {"timing": True, "next_timed": 16, "wall": 0.03}, {"gpu_time": True}),
    ("gpu_budgeted_step", 15, EXPLICIT, {"timing": True, "next_timed": 40}, {"budget": True, "gpu_time": True}),
    ("gpu_every_0", 15, Schedule(gpu_every=0), {"timing": True, "next_timed": 16}, {"gpu_time": True}),
    ("gpu_every_0_quiet", 14, Schedule(gpu_every=0), {"timing": True, "next_timed": 16}, {"gpu_time": False}),
    # FLOPs: step 30, then one in flops_every.
    ("flops_first", 29, DEFAULT, {}, {"count_flops": True}),
    ("flops_not_due", 30, DEFAULT, {}, {"count_flops": False}),
    ("flops_again", 2029, DEFAULT, {}, {"count_flops": True}),
    ("flops_off", 29, Schedule(flops_every=0), {}, {"count_flops": False}),
    # CUDA probes: every 8 boundaries up to 64, every 64 after; none once the device is known or without CUDA.
    ("probe_due", 8, DEFAULT, {"cuda_known": False}, {"cuda_probe": True}),
    ("probe_not_due", 9, DEFAULT, {"cuda_known": False}, {"cuda_probe": False}),
    ("probe_64", 64, DEFAULT, {"cuda_known": False}, {"cuda_probe": True}),
    ("probe_rarely", 72, DEFAULT, {"cuda_known": False}, {"cuda_probe": False}),
    ("probe_128", 128, DEFAULT, {"cuda_known": False}, {"cuda_probe": True}),
    ("probe_device_known", 8, DEFAULT, {}, {"cuda_probe": False}),
    ("probe_no_cuda_build", 8, Schedule(cuda_probes=False), {"cuda_known": False}, {"cuda_probe": False}),
    # The next boundary with work: the earliest of a probe, a FLOP count, a timed step, a budget candidate.
    ("next_probe", 1, DEFAULT, {"cuda_known": False}, {"next_busy": 8, "budget_candidate": NO_CANDIDATE}),
    ("next_budget_candidate", 1, DEFAULT, {}, {"next_busy": 15, "budget_candidate": 15, "other_due": 29}),
    ("next_flops", 16, DEFAULT, {}, {"next_busy": 29, "budget_candidate": NO_CANDIDATE, "other_due": 29}),
    (
        "next_timed_step",
        16,
        DEFAULT,
        {"timing": True, "next_timed": 20},
        {"next_busy": 19, "budget_candidate": NO_CANDIDATE},
    ),
    ("next_timed_now", 15, EXPLICIT, {"timing": True, "next_timed": 16}, {"next_busy": 23, "other_due": 23}),
    ("next_nothing_due", 40, Schedule(budget_every=0, flops_every=0), {}, {"next_busy": NEVER}),
    ("next_every_boundary", 40, Schedule(quiet=False), {}, {"next_busy": 41, "budget_candidate": NO_CANDIDATE}),
]


@pytest.mark.parametrize(("seq", "schedule", "given", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_plan(seq: int, schedule: Schedule, given: dict[str, Any], expected: dict[str, Any]) -> None:
    got = plan(seq, schedule, **given)._asdict()
    assert {name: got[name] for name in expected} == expected


@pytest.mark.parametrize(
    ("seq", "other_due", "expected"),
    [(15, 40, (31, 31)), (15, 29, (29, NO_CANDIDATE)), (31, 47, (47, NO_CANDIDATE))],
)
def test_a_skipped_budget_candidate_plans_the_next(seq: int, other_due: int, expected: tuple[int, int]) -> None:
    assert DEFAULT.skip_candidate(seq, other_due) == expected


def test_first_timed_step() -> None:
    assert EXPLICIT.first_timed(9) == 16 and EXPLICIT.first_timed(16) == 16
    assert Schedule(gpu_every=0).first_timed(9) == NEVER


@pytest.mark.parametrize("schedule", [DEFAULT, EXPLICIT, Schedule(budget_every=5, flops_every=7)], ids=str)
@pytest.mark.parametrize("cuda_known", [True, False])
def test_the_boundaries_before_next_busy_have_nothing_due(schedule: Schedule, cuda_known: bool) -> None:
    """Quiet boundaries skip nothing: between a busy boundary and its next_busy, no step is a budget candidate, a
    FLOP-count step or on GPU timing's schedule, and no probe is due."""
    timing = cuda_known
    next_timed = schedule.first_timed(1)
    seq = 0
    while seq < 3000:
        busy = plan(seq, schedule, timing=timing, next_timed=next_timed, cuda_known=cuda_known)
        next_timed = busy.next_timed
        for quiet in range(seq + 1, busy.next_busy):
            step = plan(quiet, schedule, timing=timing, next_timed=next_timed, cuda_known=cuda_known)
            assert not (step.budget or step.count_flops or step.cuda_probe), (seq, quiet)
            assert step.next_timed == next_timed, (seq, quiet)
        assert busy.next_busy > seq
        seq = busy.next_busy
