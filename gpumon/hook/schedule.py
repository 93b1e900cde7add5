"""The hook's step schedule: a pure plan from a step boundary to what it does, like torch.profiler's `schedule()`.

`Schedule` holds the settings (how often a step is budgeted, GPU-timed, FLOP-counted, how often CUDA is probed);
`Schedule.at` takes the boundary's number and what it needs to know of the recent steps (the last step's time, the
time since the last budgeted step, whether GPU timing runs and when its regular schedule times next) and returns a
`BoundaryPlan`: budget the step opening here?, GPU-time it?, may a FLOP count start?, probe CUDA?, and the next
boundary with work. `HookRuntime` executes the plan and holds the state; its quiet boundaries compare the step
number with the plan's `next_busy` and do nothing else. No torch, no clock, no thread: a table of cases tests it
(tests/hook/test_schedule.py).

Numbering: boundary `seq` closes step `seq` and opens step `seq + 1`.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from gpumon.hook.budget import BUDGET_EVERY, BUDGET_MIN_GAP_S, BUDGET_SLOW_STEP_S
from gpumon.hook.flops import EVERY as FLOPS_EVERY
from gpumon.hook.flops import FIRST_STEP as FLOPS_FIRST_STEP

CUDA_PROBE_EVERY = 8
"""Boundaries between checks of torch.cuda.is_initialized() while the job has not touched CUDA, for its first
CUDA_PROBE_RARELY_AFTER steps (a job usually initializes CUDA before its first step)..."""
CUDA_PROBE_RARELY_AFTER = 64
CUDA_PROBE_RARELY_EVERY = 64
"""...and after those (a CPU job would otherwise pay for a probe, about 20 us on the VM, every 8 steps)."""
GPU_TIMING_EVERY = 8
"""Default: CUDA events time one step in this many (events cost the job time on fast steps)..."""
GPU_TIMING_MIN_GAP_S = 0.1
"""...and, unless GPUMON_HOOK_GPU_TIMING names N, timed steps at least this far apart (by the last step's time: a
timed step and the records waiting behind its events cost a fast step about 90 us on an H200, so at most ten a
second bound it by 0.1%)..."""
GPU_TIMING_MAX_STRIDE = 256
"""...but never more steps apart than this (a freak short step cannot put the next timed one out of sight)..."""
GPU_TIMING_SLOW_STEP_S = 0.020
"""...and every step after one that took at least this long (there the cost is negligible)."""
NO_CANDIDATE = -1
"""`BoundaryPlan.budget_candidate` when the next busy boundary is not (only) a budget candidate."""
NEVER = sys.maxsize
"""A step that never comes (a schedule turned off)."""


class BoundaryPlan(NamedTuple):
    """What boundary `seq` does (a NamedTuple: immutable, and built in one call on the hook's busy path)."""

    budget: bool
    """Measure the step opening here's time budget (BudgetMeter)."""
    budget_on_schedule: bool
    """It is the one-in-`budget_every` step, which the next one keeps `budget_min_gap_s` from (a diagnosis window's
    steps are budgeted besides, without moving the gap)."""
    gpu_time: bool
    """With GPU timing on: time the step opening here with CUDA events."""
    next_timed: int
    """With GPU timing on: the step the regular GPU schedule times next (from this boundary on)."""
    count_flops: bool
    """The step opening here is a FLOP-count step by its number (FlopSampler.due has the last word: its recount gap,
    whether counting is possible)."""
    cuda_probe: bool
    """Check whether the job has initialized CUDA (it has not so far)."""
    next_busy: int
    """The next boundary with work, if nothing is left in flight after this one (the runtime makes the next boundary
    busy while a budgeted, timed or counted step, a capture or a diagnosis runs, or a request waits)."""
    budget_candidate: int
    """`next_busy` when only a budget candidate is due there (quiet too while within `budget_min_gap_s` of the last
    budgeted step: then `Schedule.skip_candidate` plans past it); NO_CANDIDATE otherwise."""
    other_due: int
    """The next boundary with anything but a budget candidate due."""
    quiet_below_s: float
    """Boundaries before `next_busy` are quiet only after steps shorter than this (a slow step budgets the next one,
    with the gap; with GPU timing on, a slow step times the next one)."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """The hook's schedule settings, and the plan they give each step boundary (`at`)."""

    budget_every: int = BUDGET_EVERY
    """Budget one step in this many (0: never); GPUMON_HOOK_BUDGET_EVERY."""
    budget_min_gap_s: float = BUDGET_MIN_GAP_S
    """...at least this far apart (0 with an explicit N: exactly one in N)."""
    gpu_every: int = GPU_TIMING_EVERY
    """GPU-time one step in this many once CUDA is initialized (0: only after slow and budgeted steps, or never if 0
    when CUDA is found); GPUMON_HOOK_GPU_TIMING."""
    gpu_min_gap_s: float = GPU_TIMING_MIN_GAP_S
    """...at least this far apart by the last step's time (0 with an explicit N)."""
    flops_every: int = FLOPS_EVERY
    """Count one step's FLOPs in this many after `flops_first` (0: never); GPUMON_HOOK_FLOPS."""
    flops_first: int = FLOPS_FIRST_STEP
    """The first FLOP-count step."""
    cuda_probes: bool = True
    """Probe for CUDA while the job has not initialized it (False: a torch built without CUDA)."""
    quiet: bool = True
    """Whether boundaries with nothing due are quiet; False: every boundary is a busy one (the quiet path's check:
    the same records, budgets, timings and counts either way)."""

    def at(
        self,
        seq: int,
        wall: float,
        since_budgeted: float,
        diagnosing: bool,
        timing: bool,
        next_timed: int,
        cuda_known: bool,
    ) -> BoundaryPlan:
        """The plan of boundary `seq` (closing step `seq`, opening `seq + 1`), given the last step's time `wall`, the
        seconds `since_budgeted` the last budgeted step on schedule (math.inf: none yet), whether a diagnosis window
        is counting (every step budgeted), whether GPU timing runs (`timing`) and the next step its regular schedule
        times (`next_timed`), and whether the job's CUDA device is known."""
        # Called at each busy boundary (cold, like all the hook's code): arithmetic inline, no calls but the record's.
        step = seq + 1
        every = self.budget_every
        on_schedule = (
            every > 0
            and not diagnosing
            and (step % every == 0 or (wall >= BUDGET_SLOW_STEP_S and self.budget_min_gap_s > 0))
            and since_budgeted >= self.budget_min_gap_s
        )
        budget = on_schedule or (diagnosing and every > 0)

        gpu_time = False
        below_s = BUDGET_SLOW_STEP_S if every > 0 and self.budget_min_gap_s > 0 else math.inf
        if timing:
            gpu_every = self.gpu_every
            below_s = min(below_s, GPU_TIMING_SLOW_STEP_S)
            if step >= next_timed and gpu_every > 0:
                gap_s = self.gpu_min_gap_s
                if gap_s <= 0:  # the next multiple of gpu_every
                    next_timed = (step // gpu_every + 1) * gpu_every
                else:  # enough steps of the last one's time to span the gap, within [gpu_every, MAX_STRIDE]
                    steps = math.ceil(gap_s / wall) if wall > 0 else GPU_TIMING_MAX_STRIDE
                    next_timed = step + max(gpu_every, min(GPU_TIMING_MAX_STRIDE, steps))
                gpu_time = True
            else:
                gpu_time = budget or wall >= GPU_TIMING_SLOW_STEP_S

        flops_every = self.flops_every
        first = self.flops_first
        flops = flops_every > 0 and step >= first and (step - first) % flops_every == 0
        probes = self.cuda_probes and not cuda_known
        probe_now = (
            probes and seq % (CUDA_PROBE_EVERY if seq <= CUDA_PROBE_RARELY_AFTER else CUDA_PROBE_RARELY_EVERY) == 0
        )

        if not self.quiet:  # every boundary busy
            due = next_busy = step
            candidate = NO_CANDIDATE
            below_s = 0.0
        else:
            if flops_every > 0:  # the boundary opening the next FLOP-count step after this one
                after = step + 1 if step >= first else first
                due = after + (first - after) % flops_every - 1
            else:
                due = NEVER
            if timing and self.gpu_every > 0 and next_timed - 1 < due:  # the boundary opening the next timed step
                due = next_timed - 1 if next_timed > step else step
            if probes:
                probe_every = CUDA_PROBE_EVERY if step <= CUDA_PROBE_RARELY_AFTER else CUDA_PROBE_RARELY_EVERY
                probe = -(-step // probe_every) * probe_every
                if probe < due:
                    due = probe
            candidate = (step + every) // every * every - 1 if every > 0 else NEVER  # opens a multiple of every
            if candidate < due:
                next_busy = candidate
            else:
                next_busy = due
                candidate = NO_CANDIDATE
        return _plan((budget, on_schedule, gpu_time, next_timed, flops, probe_now, next_busy, candidate, due, below_s))

    def skip_candidate(self, seq: int, other_due: int) -> tuple[int, int]:
        """Budget candidate `seq` came within `budget_min_gap_s` of the last budgeted step and was quiet: (the next
        busy boundary, the budget candidate there or NO_CANDIDATE), the next candidate or `other_due`."""
        candidate = seq + self.budget_every
        if candidate < other_due:
            return candidate, candidate
        return other_due, NO_CANDIDATE

    def first_timed(self, step: int) -> int:
        """The first step GPU timing times on its regular schedule from `step` on (when it starts, or its setting
        changes): the first multiple of `gpu_every`; NEVER when that is 0."""
        return _next_multiple(step, self.gpu_every) if self.gpu_every > 0 else NEVER


def _next_multiple(step: int, every: int) -> int:
    """The first multiple of `every` at or after `step`."""
    return -(-step // every) * every


_plan: Callable[[tuple[bool, bool, bool, int, bool, bool, int, int, int, float]], BoundaryPlan] = functools.partial(
    tuple.__new__, BoundaryPlan
)
"""BoundaryPlan(*fields) for `Schedule.at`, without the Python-level __new__ NamedTuple generates (a third of at's
cost): tuple.__new__ bound to the class, all in C."""
