"""comm_bound without a profiler capture: the collectives the hook timed live on GPU-timed steps."""

from __future__ import annotations

from gpumon.advisor.categories import COMM_BOUND
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import build_signals
from gpumon.jobs.jobstate import HookedView, StepPoint


def view_of(comm_ms: float | None, steps: int = 40) -> HookedView:
    """Steps of 100 ms, every other one GPU-timed (90 ms of GPU time), `comm_ms` of them in collectives."""
    points = tuple(
        StepPoint(
            seq=i + 1,
            t=1000.0 + 0.1 * (i + 1),
            wall_ms=100.0,
            data_ms=1.0,
            gpu_ms=90.0 if i % 2 else None,
            samples=32,
            source="optimizer",
            comm_ms=comm_ms if i % 2 else None,
        )
        for i in range(steps)
    )
    return HookedView(pid=7, connected=True, steps=points, state={"cuda": {"initialized": True, "device": 0}})


def test_collectives_the_stream_waited_in_make_the_job_comm_bound() -> None:
    signals = build_signals([], view_of(40.0), start=1000.0, end=1004.0)
    assert signals.comm.comm_live_share == 0.4 and signals.comm.comm_live_steps == 20
    finding = diagnose(signals)
    assert finding.category == COMM_BOUND and finding.severity == 0.4
    assert "40%" in finding.evidence and "timed live on 20 steps" in finding.evidence


def test_a_little_communication_or_none_is_not_a_finding() -> None:
    assert diagnose(build_signals([], view_of(5.0), start=1000.0, end=1004.0)).category != COMM_BOUND
    signals = build_signals([], view_of(None), start=1000.0, end=1004.0)
    assert signals.comm.comm_live_share is None
