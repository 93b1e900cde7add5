"""allocator_churn: torch.cuda.empty_cache() (or memory pressure) makes the caching allocator free and cudaMalloc
again every step, each time after draining the GPU."""

from __future__ import annotations

from gpumon.advisor.categories import ALLOCATOR_CHURN
from gpumon.advisor.rules.common import Candidate, join_parts, pct, rounded, step_model_confidence
from gpumon.advisor.signals import Signals


def allocator_evidence(signals: Signals, share: float) -> Candidate:
    """The allocator's share of the step, with the calls, their line and the device allocations per step."""
    calls = signals.budget.empty_cache_per_step
    allocs = signals.budget.device_allocs_per_step
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time in and after torch.cuda.empty_cache()",
        f"{calls:.1f} call{'s' if round(calls, 1) != 1 else ''} a step" if calls else None,
        f"at {signals.budget.empty_cache_sites[0]}" if signals.budget.empty_cache_sites else None,
        f"{allocs:.0f} cudaMalloc calls a step in steady state" if allocs else None,
    )
    numbers = {
        "alloc_idle": rounded(share),
        "empty_cache_share": rounded(signals.budget.empty_cache_share),
        "empty_cache_per_step": rounded(calls),
        "empty_cache_sites": list(signals.budget.empty_cache_sites[:3]),
        "device_allocs_per_step": rounded(allocs),
    }
    return Candidate(ALLOCATOR_CHURN, share, step_model_confidence(signals), evidence, numbers)
