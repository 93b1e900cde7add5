"""straggler: the rank of a distributed job the others wait for."""

from __future__ import annotations

from gpumon import units
from gpumon.advisor.categories import (
    STRAGGLER,
)
from gpumon.advisor.rules.common import (
    Candidate,
    join_parts,
    pct,
    rounded,
)
from gpumon.advisor.signals import Signals
from gpumon.jobs.jobstate import STRAGGLER_THRESHOLD

STRAGGLER_CONFIDENCE = 0.75


def rule_straggler(signals: Signals) -> Candidate | None:
    """straggler: the rank the others wait for, with its own budget. Ranks out of step: its step's excess over the
    others' median is the share lost; in lockstep (DDP), its data wait beyond the others' is."""
    step_ms, others_ms = signals.straggler.step_ms, signals.straggler.others_step_ms
    if signals.straggler.pid is None or not step_ms or others_ms is None:
        return None
    if step_ms > others_ms * (1 + STRAGGLER_THRESHOLD):  # out of step, as jobs.jobstate.find_straggler judges
        share = (step_ms - others_ms) / step_ms
        compared = f"takes {units.milliseconds(step_ms)} a step against {units.milliseconds(others_ms)} on the others"
    else:
        own, others = signals.straggler.data_share or 0.0, signals.straggler.others_data_share or 0.0
        share = max(0.0, own - others)
        compared = f"waits for data {pct(own)} of its step against {pct(others)} on the others, who wait for it in "
        compared += "their all-reduce"
    name = f"rank {signals.straggler.rank}" if signals.straggler.rank is not None else "a rank"
    budget = ", ".join(
        f"{label} {pct(value)}"
        for label, value in (
            ("data", signals.straggler.data_share),
            ("GPU", signals.straggler.gpu_share),
            ("rest", signals.straggler.rest_share),
        )
        if value is not None
    )
    evidence = join_parts(f"{name} (pid {signals.straggler.pid}) {compared}", f"its step: {budget}" if budget else None)
    numbers = {
        "straggler_rank": signals.straggler.rank,
        "straggler_pid": signals.straggler.pid,
        "straggler_share": rounded(share),
        "straggler_step_ms": rounded(step_ms),
        "others_step_ms": rounded(others_ms),
        "straggler_data_share": rounded(signals.straggler.data_share),
        "straggler_gpu_share": rounded(signals.straggler.gpu_share),
        "straggler_rest_share": rounded(signals.straggler.rest_share),
        "others_data_share": rounded(signals.straggler.others_data_share),
        "ranks": signals.straggler.ranks,
    }
    return Candidate(STRAGGLER, share, STRAGGLER_CONFIDENCE, evidence, numbers)
