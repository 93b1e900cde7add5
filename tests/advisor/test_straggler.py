"""The straggler category: the rank the others wait for, named with its own budget, from the ranks' summaries."""

from __future__ import annotations

from gpumon.advisor.categories import HEADLINES, STRAGGLER
from gpumon.advisor.rules import diagnose, rule_straggler
from gpumon.advisor.signals import Signals, build_signals
from gpumon.jobs.jobstate import Breakdown, HookedView, RankSummary, find_straggler


def rank(number: int, wall_ms: float, data_ms: float, breakdown: Breakdown | None = None) -> RankSummary:
    return RankSummary(
        rank=number,
        pid=1000 + number,
        steps_per_s=1000 / wall_ms,
        wall_ms=wall_ms,
        data_ms=data_ms,
        gpu_ms=None,
        ended=False,
        breakdown=breakdown or Breakdown(data=data_ms / wall_ms, gpu=None, rest=1 - data_ms / wall_ms),
    )


def group(ranks: tuple[RankSummary, ...]) -> HookedView:
    return HookedView(pid=ranks[0].pid, connected=True, ranks=ranks, straggler=find_straggler(ranks))


def test_ranks_in_lockstep_name_the_one_waiting_for_its_data_with_its_budget() -> None:
    """DDP keeps every rank as slow as the slowest: equal step times, and rank 1's data wait is what the others wait
    for; its share is its data wait beyond theirs, and its own budget is in the evidence."""
    ranks = (
        rank(0, 40.0, 0.4),
        rank(1, 40.5, 24.0, Breakdown(data=0.6, gpu=0.3, rest=0.1)),
        rank(2, 40.2, 0.8),
        rank(3, 40.1, 1.2),
    )
    signals = build_signals([], group(ranks))
    assert (signals.straggler.ranks, signals.straggler.rank, signals.straggler.pid) == (4, 1, 1001)
    candidate = rule_straggler(signals)
    assert candidate is not None and candidate.category == STRAGGLER
    assert abs(candidate.severity - (0.6 - 0.8 / 40.2)) < 1e-9  # beyond the others' median data share
    assert candidate.evidence.startswith("rank 1 (pid 1001) waits for data 60% of its step against 2% on the others")
    assert "its step: data 60%, GPU 30%, rest 10%" in candidate.evidence
    finding = diagnose(signals)
    assert finding.category == STRAGGLER and finding.headline == HEADLINES[STRAGGLER]
    assert finding.numbers["straggler_rank"] == 1 and finding.numbers["ranks"] == 4


def test_ranks_out_of_step_name_the_slow_one_by_its_excess() -> None:
    ranks = (rank(0, 20.0, 1.0), rank(1, 50.0, 1.0), rank(2, 21.0, 1.0))
    signals = build_signals([], group(ranks))
    candidate = rule_straggler(signals)
    assert candidate is not None
    assert abs(candidate.severity - (50.0 - 21.0) / 50.0) < 1e-9  # against the others' median (21 ms)
    assert "rank 1 (pid 1001) takes 50.0 ms a step against 21.0 ms on the others" in candidate.evidence


def test_no_straggler_no_finding_and_shares_stay_within_the_step() -> None:
    even = (rank(0, 20.0, 1.0), rank(1, 20.5, 1.2))
    assert rule_straggler(build_signals([], group(even))) is None
    assert rule_straggler(Signals.of()) is None  # one process, no ranks
    ranks = (rank(0, 40.0, 0.4), rank(1, 40.5, 34.0), rank(2, 40.2, 0.8))
    signals = build_signals([], group(ranks))
    busy = Signals.of(**{**signals.to_dict(), "gpus": (), "data_share": 0.7, "step_ms": 40.0, "steps": 100})
    finding = diagnose(busy)
    shares = [finding.severity, *(f.severity for f in finding.secondary)]
    assert STRAGGLER in {finding.category, *(f.category for f in finding.secondary)}
    assert sum(shares) <= 1.0 + 1e-9


def test_straggler_signals_round_trip_through_json() -> None:
    ranks = (rank(0, 40.0, 0.4), rank(1, 40.5, 24.0), rank(2, 40.2, 0.8))
    signals = build_signals([], group(ranks))
    again = Signals.from_dict(signals.to_dict())
    assert again.straggler.pid == 1001 and diagnose(again).category == STRAGGLER
