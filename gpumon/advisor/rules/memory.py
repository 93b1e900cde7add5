"""memory_imbalance: one GPU of a job holds far more memory than the others (nn.DataParallel gathering)."""

from __future__ import annotations

from gpumon.advisor.categories import (
    MEMORY_IMBALANCE,
)
from gpumon.advisor.rules.common import (
    Candidate,
    gib,
    join_parts,
    pct100,
    rounded,
)
from gpumon.advisor.signals import SOURCE_HOOK, Signals

IMBALANCE_RATIO = 1.3
IMBALANCE_BYTES = 1 << 30


def rule_memory_imbalance(signals: Signals) -> Candidate | None:
    gpus = [g for g in signals.gpu.gpus if g.memory_used is not None]
    if len(gpus) < 2:
        return None
    heaviest = max(gpus, key=lambda g: g.memory_used or 0.0)
    others = [g for g in gpus if g is not heaviest]
    lightest = min(others, key=lambda g: g.memory_used or 0.0)
    top, low = heaviest.memory_used or 0.0, lightest.memory_used or 0.0
    if top - low < IMBALANCE_BYTES or (low > 0 and top / low < IMBALANCE_RATIO):
        return None
    mean_others = sum(g.memory_used or 0.0 for g in others) / len(others)
    util_text = None
    if heaviest.utilization is not None and lightest.utilization is not None:
        util_text = f"GPU-Util {pct100(heaviest.utilization)} vs {pct100(lightest.utilization)}"
    ratio = top / low if low > 0 else None
    evidence = join_parts(
        f"GPU {heaviest.index} holds {gib(top)}, the other {len(others)} GPU{'s' if len(others) > 1 else ''} "
        f"{gib(mean_others)} on average" + (f" ({ratio:.1f}x)" if ratio else ""),
        util_text,
        "nn.DataParallel gathers on one GPU" if len(gpus) >= 2 else None,
    )
    numbers = {
        "memory_used": {str(g.index): rounded(g.memory_used, 0) for g in gpus},
        "gpu_util": {str(g.index): rounded(g.utilization) for g in gpus},
    }
    severity = max(0.2, (top - low) / top)
    confidence = 0.8 if signals.source == SOURCE_HOOK else 0.6
    return Candidate(MEMORY_IMBALANCE, severity, confidence, evidence, numbers)
