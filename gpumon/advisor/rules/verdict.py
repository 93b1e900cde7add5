"""The verdict: the step model's largest owner of GPU idle time over the bar is the finding, the others over the bar
its secondaries; GPU-side problems (precision, throttling, imbalance, a straggler, NCCL in a capture) compete by their
own shares. `healthy` only when the GPU is busy; idle that no owner explains is said as such."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from gpumon.advisor.categories import (
    ALLOCATOR_CHURN,
    COMM_BOUND,
    CPU_BOUND,
    CPU_OPTIMIZER,
    GC_BOUND,
    HOST_SYNC,
    INPUT_BOUND,
    IO_BOUND,
    LAUNCH_BOUND,
    TRANSFER_BOUND,
    UNEXPLAINED_IDLE,
)
from gpumon.advisor.rules.allocator import allocator_evidence
from gpumon.advisor.rules.comm import rule_comm
from gpumon.advisor.rules.common import (
    MIN_SEVERITY,
    Candidate,
    Finding,
    as_finding,
    gpu_part,
    join_parts,
    nvml_idle,
    pct,
    rounded,
    step_model_confidence,
)
from gpumon.advisor.rules.cpu_bound import rule_cpu_bound
from gpumon.advisor.rules.cpu_optimizer import cpu_optimizer_evidence, rule_cpu_optimizer
from gpumon.advisor.rules.data import rule_data
from gpumon.advisor.rules.gc_bound import gc_evidence, rule_gc_bound
from gpumon.advisor.rules.healthy import healthy_finding
from gpumon.advisor.rules.launch import launch_evidence, rule_launch
from gpumon.advisor.rules.memory import rule_memory_imbalance
from gpumon.advisor.rules.owners import category_shares
from gpumon.advisor.rules.precision import rule_precision
from gpumon.advisor.rules.straggler import rule_straggler
from gpumon.advisor.rules.sync import rule_host_sync
from gpumon.advisor.rules.throttled import rule_throttled
from gpumon.advisor.rules.transfer import rule_transfer, transfer_evidence
from gpumon.advisor.rules.unexplained import unexplained_evidence
from gpumon.advisor.signals import Signals
from gpumon.jobs import step_model
from gpumon.jobs.step_model import LABELS

HEALTHY_BUSY = 0.85
"""GPU busy this share of the step (or more) leaves too little idle to name: the job is healthy unless a GPU-side
problem (fp32 math, throttling...) stands out."""

Rule = Callable[[Signals], Candidate | None]
SIDE_RULES: tuple[Rule, ...] = (
    rule_precision,
    rule_memory_imbalance,
    rule_throttled,
    rule_comm,
    rule_straggler,
)
"""Problems the step model's owners of idle time do not hold: how the busy time is spent, and across GPUs or ranks."""
MODEL_FREE_RULES: tuple[Rule, ...] = (
    rule_cpu_bound,
    rule_data,
    rule_host_sync,
    rule_launch,
    rule_transfer,
    rule_cpu_optimizer,
    rule_gc_bound,
)
"""The owners' own rules, for a job with no step model (no samples yet, no GPU figures)."""


def _from_rule(rule: Rule, categories: frozenset[str], fallback: str) -> Callable[[Signals, float], Candidate]:
    """An owner's evidence from its category's rule (its words and numbers, the owner's share), else a plain line."""

    def evidence(signals: Signals, share: float) -> Candidate:
        candidate = rule(signals)
        if candidate is not None and candidate.category in categories:
            return replace(candidate, severity=share)
        category = next(iter(sorted(categories)))
        text = join_parts(f"the GPU idles {pct(share)} of the time {fallback}", gpu_part(signals))
        return Candidate(category, share, step_model_confidence(signals), text, {"idle_share": rounded(share)})

    return evidence


EVIDENCE: Mapping[str, Callable[[Signals, float], Candidate]] = {
    INPUT_BOUND: _from_rule(rule_data, frozenset({INPUT_BOUND, IO_BOUND}), "while the training loop waits for data"),
    HOST_SYNC: _from_rule(rule_host_sync, frozenset({HOST_SYNC}), "in and after host-device syncs"),
    CPU_BOUND: _from_rule(rule_cpu_bound, frozenset({CPU_BOUND}), "while the training thread runs its own code"),
    COMM_BOUND: _from_rule(rule_comm, frozenset({COMM_BOUND}), "while the stream waits in collectives"),
    LAUNCH_BOUND: launch_evidence,
    TRANSFER_BOUND: transfer_evidence,
    GC_BOUND: gc_evidence,
    ALLOCATOR_CHURN: allocator_evidence,
    CPU_OPTIMIZER: cpu_optimizer_evidence,
    UNEXPLAINED_IDLE: unexplained_evidence,
}
"""Each category an owner maps to, and how its evidence is told."""


def _owner_candidates(signals: Signals) -> list[Candidate]:
    return [
        EVIDENCE[category](signals, share)
        for category, share in category_shares(signals, MIN_SEVERITY).items()
        if share >= MIN_SEVERITY
    ]


def _idle_of(signals: Signals) -> float | None:
    """The step's GPU idle share: the step model's, else GPU-Util's."""
    if signals.step_model.step_shares:
        return max(0.0, 1.0 - signals.step_model.step_shares.get(step_model.GPU_BUSY, 0.0))
    return nvml_idle(signals)


def _spread(signals: Signals) -> str:
    """The owners' shares in one line, largest first: 'launch 12%, cpu 10%, data 8%'."""
    owners = sorted(
        ((owner, share) for owner, share in signals.step_model.step_shares.items() if owner != step_model.GPU_BUSY),
        key=lambda pair: -pair[1],
    )
    parts = [f"{LABELS.get(owner, owner)} {pct(share)}" for owner, share in owners if share >= 0.01]
    return "spread over " + ", ".join(parts[:5]) if parts else ""


def _quiet(signals: Signals) -> Finding:
    """No cause over the bar: healthy where the GPU is busy; else the idle said as such, never as healthy."""
    idle = _idle_of(signals)
    if signals.has_gpu and idle is not None and idle >= 1.0 - HEALTHY_BUSY:
        return as_finding(unexplained_evidence(signals, idle, _spread(signals)), signals.source)
    return healthy_finding(signals)


def _merged(candidates: list[Candidate]) -> list[Candidate]:
    """One candidate per category, the most severe."""
    best: dict[str, Candidate] = {}
    for candidate in candidates:
        held = best.get(candidate.category)
        if held is None or candidate.severity > held.severity:
            best[candidate.category] = candidate
    return list(best.values())


def _within_the_step(candidates: list[Candidate]) -> list[Candidate]:
    """Each candidate's severity is a share of the step time: in order of weight, each is given at most what the
    ones before left, so the shares add up to at most 100% (and none is dropped)."""
    left = 1.0
    out = []
    for candidate in candidates:
        share = max(0.0, min(candidate.severity, left))
        left -= share
        out.append(replace(candidate, severity=share))
    return out


def diagnose(signals: Signals) -> Finding:
    """The dominant bottleneck of the job (or `healthy`), with the other problems found as secondary findings."""
    owner_rules = (
        _owner_candidates(signals)
        if signals.step_model.step_shares
        else [c for rule in MODEL_FREE_RULES if (c := rule(signals)) is not None]
    )
    side = [c for rule in SIDE_RULES if (c := rule(signals)) is not None]
    candidates = _merged([c for c in owner_rules + side if c.severity >= MIN_SEVERITY])
    if not candidates:
        return _quiet(signals)
    candidates.sort(key=lambda c: c.severity * c.confidence, reverse=True)
    primary, *others = _within_the_step(candidates)
    secondary = tuple(as_finding(c, signals.source) for c in others)
    return replace(as_finding(primary, signals.source), secondary=secondary)
