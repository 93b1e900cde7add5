"""A guided run's verdict says what each owner knob proved or refuted, with the owner's share of the step and the
category the diagnosis had named where it named another."""

from __future__ import annotations

from dataclasses import replace

from advisor_support import FakeRunner, measurement

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.categories import ALLOCATOR_CHURN, GC_BOUND, LAUNCH_BOUND
from gpumon.advisor.guided import GuidedRun
from gpumon.advisor.results import PROVED, REFUTED, UNDECIDED
from gpumon.advisor.rules import Finding

SKIP_EMPTY_CACHE = Experiment({"skip_empty_cache": True}, previous={"skip_empty_cache": False})
GC_FREEZE = Experiment({"gc_freeze": True}, previous={"gc_freeze": False})
BENCHMARK = Experiment({"cudnn_benchmark": True}, previous={"cudnn_benchmark": False})


def run(rates: dict[str, tuple[float, ...]], finding: Finding | None = None):  # type: ignore[no-untyped-def]
    """The guided run over the knobs in `rates` (in catalogue order), each measured with the kept ones before it."""
    only = [e for e in (BENCHMARK, SKIP_EMPTY_CACHE, GC_FREEZE) if set(e.knobs) <= set(rates)]
    outcomes = {}
    for index, experiment in enumerate(only):
        (name,) = experiment.knobs
        for kept in range(1 << index):
            knobs = {e_name: True for bit, e in enumerate(only[:index]) if kept >> bit & 1 for e_name in e.knobs}
            outcomes[frozenset({**knobs, name: True}.items())] = measurement(*rates[name])
    runner = FakeRunner(measurement(143.0, 145.0, 141.0), outcomes)
    return replace(GuidedRun(runner, only=only).run(), finding=finding)


def test_a_winning_owner_knob_proves_its_owner_against_the_named_category() -> None:
    report = run(
        {
            "cudnn_benchmark": (143.0, 144.0, 142.0),
            "skip_empty_cache": (279.0, 280.0, 278.0),
            "gc_freeze": (280, 279, 281),
        },
        finding=Finding(LAUNCH_BOUND, "launches", 0.53),
    )
    results = {test.category: test.result for test in report.owners}
    assert results == {ALLOCATOR_CHURN: PROVED, GC_BOUND: REFUTED}
    allocator = next(test for test in report.owners if test.category == ALLOCATOR_CHURN)
    assert allocator.share is not None and abs(allocator.share - (1 - 143.0 / 279.0)) < 0.01
    assert report.verdict.startswith("kept skip_empty_cache off -> on (2.0x); allocator_churn proved: skip_empty_cache")
    assert "held about 49% of the step (the diagnosis had named launch_bound)" in report.verdict
    assert "gc_bound refuted: gc_freeze gave no win" in report.verdict
    assert [owner["result"] for owner in report.to_dict()["owners"]] == [PROVED, REFUTED]


def test_a_run_without_owner_knobs_keeps_its_verdict_and_noise_decides_nothing() -> None:
    plain = run({"cudnn_benchmark": (300.0, 301.0, 299.0)})
    assert plain.verdict == "kept cudnn_benchmark off -> on (2.1x)" and plain.owners == ()
    noisy = run({"gc_freeze": (60.0, 400.0, 230.0)}, finding=Finding(GC_BOUND, "gc", 0.4))
    assert [test.result for test in noisy.owners] == [UNDECIDED]
    assert "gc_bound" not in noisy.verdict
