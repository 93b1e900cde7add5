"""The advisor on signals recorded from the scenario corpus on an H200 and on 2x H200 (benchmarks/scenario_truth.py,
2026-11-27): each case's category, and its share against the truth its ablation measured (within 10 points). Issue
24's failures among them: main-thread preprocessing called healthy (now cpu_bound with its line, hooked and by
py-spy), a logging sync's share read as the host's wait in it (now the idle it causes), low precision at a fixed 50%,
hand-made all-reduces healthy without --profile (now comm_bound from the collectives timed live or captured)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpumon.advisor.categories import COMM_BOUND, CPU_BOUND, HEALTHY, HOST_SYNC
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import Signals

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"
CASES: list[dict[str, Any]] = [
    case
    for name in ("h200-2026-11-27.json", "h200x2-ddp-2026-11-27.json")
    for case in json.loads((FIXTURES / name).read_text())["cases"]
]
SCORED = {
    "fp32_matmul": "bf16",
    "launch_bound": "cuda_graph",
    "two_cause_cpu_sync": "gpu_preprocess",
    "cpu_preprocess": "gpu_preprocess",
    "logging_sync": "no_sync",
    "ddp_manual_allreduce": "no_comm",
}
"""The fix whose measured gain is the whole share of the expected category (two_cause_loader_sync's `workers` is a
partial fix: 14 workers still cannot keep up, so it is not held to the data-wait share)."""


KNOWN_MISSES = {
    "ddp_manual_allreduce-batch8192-py-spy": "py-spy reads the training thread's time inside collectives (19%), not "
    "the GPU's exposed NCCL time: it names comm_bound where the ablation measured 13%, under the 15% bar",
    "healthy_transformer-py-spy": "GPU-Util read 69% in the py-spy window (100% in the hooked one): 31% idle that "
    "no owner py-spy can see holds, said as unexplained idle, where the ablation found nothing to remove",
}


def case_id(case: dict[str, Any]) -> str:
    run = f"-{case['run']}" if case["scenario"] == "ddp_manual_allreduce" else ""
    return f"{case['scenario']}{run}-{case['source']}"


def with_known_misses(cases: list[dict[str, Any]]) -> list[Any]:
    return [
        pytest.param(case, id=case_id(case), marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[case_id(case)]))
        if case_id(case) in KNOWN_MISSES
        else pytest.param(case, id=case_id(case))
        for case in cases
    ]


@pytest.mark.parametrize("case", with_known_misses(CASES))
def test_each_recorded_case_gets_its_category(case: dict[str, Any]) -> None:
    finding = diagnose(Signals.from_dict(case["signals"]))
    assert finding.category == case["expected"], finding.evidence
    if case["expected"] == HEALTHY:
        assert not finding.secondary, [s.category for s in finding.secondary]  # no false alarm beside it either


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["scenario"] in SCORED and c["expected"] != HEALTHY], ids=case_id
)
def test_shares_are_within_ten_points_of_the_ablation(case: dict[str, Any]) -> None:
    finding = diagnose(Signals.from_dict(case["signals"]))
    truth = case["truth"][SCORED[case["scenario"]]]
    assert abs(finding.severity - truth) <= 0.10, (finding.severity, truth, finding.evidence)


def test_main_thread_preprocessing_is_cpu_bound_at_its_line_hooked_and_by_pyspy() -> None:
    for source in ("hook", "py-spy"):
        case = next(c for c in CASES if c["scenario"] == "two_cause_cpu_sync" and c["source"] == source)
        finding = diagnose(Signals.from_dict(case["signals"]))
        assert finding.category == CPU_BOUND
        assert "scenario_common.py:77" in finding.evidence and "preprocess" in finding.evidence


def test_a_logging_sync_costs_the_idle_it_causes_not_the_wait_in_it() -> None:
    case = next(c for c in CASES if c["scenario"] == "logging_sync")
    signals = Signals.from_dict(case["signals"])
    finding = diagnose(signals)
    assert finding.category == HOST_SYNC
    # The host waited in the syncs 31% of the step; removing them gained 24%, which is what the finding says.
    assert signals.budget.sync_wait_share is not None and signals.budget.sync_wait_share > 0.3
    assert abs(finding.severity - 0.239) <= 0.05


def test_captured_communication_is_a_share_of_the_step_timed_live_not_of_the_profiled_one() -> None:
    case = next(c for c in CASES if c["scenario"] == "ddp_manual_allreduce" and c["run"] == "batch2048")
    signals = Signals.from_dict(case["signals"])
    assert signals.comm.capture_step_ms is not None and signals.step.step_ms is not None
    assert signals.comm.capture_step_ms > 1.5 * signals.step.step_ms  # the profiler stretched the captured steps
    finding = diagnose(signals)
    assert finding.category == COMM_BOUND
    assert signals.comm.comm_exposed_ms_per_step is not None
    assert finding.severity == pytest.approx(signals.comm.comm_exposed_ms_per_step / signals.step.step_ms, abs=0.01)


def test_communication_under_the_bar_is_healthy_with_the_live_share_measured() -> None:
    case = next(c for c in CASES if c["scenario"] == "ddp_manual_allreduce" and c["run"] == "batch8192")
    signals = Signals.from_dict(case["signals"])
    assert signals.comm.comm_live_share is not None
    assert abs(signals.comm.comm_live_share - case["truth"]["no_comm"]) <= 0.02  # 13.1% timed live, 13.0% by ablation
    assert diagnose(signals).category == HEALTHY


ESTIMATE_MISSES = {
    "healthy_transformer-py-spy": KNOWN_MISSES["healthy_transformer-py-spy"],
    "ddp_manual_allreduce-batch8192-py-spy": "GPU-Util 80% with the training thread in collectives 19%: the idle "
    "goes to nobody py-spy sees (26%) and comm (19%), where the ablation measured 13% for comm",
}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            case, id=case_id(case), marks=pytest.mark.xfail(strict=True, reason=ESTIMATE_MISSES[case_id(case)])
        )
        if case_id(case) in ESTIMATE_MISSES
        else pytest.param(case, id=case_id(case))
        for case in CASES
        if case["source"] == "py-spy"
    ],
)
def test_the_py_spy_step_model_names_each_case(case: dict[str, Any]) -> None:
    """The py-spy cases with their step model built as build_signals builds it now (the recordings predate it)."""
    from dataclasses import replace

    from gpumon.advisor.signals import estimate_model_figures

    signals = Signals.from_dict(case["signals"])
    signals = replace(signals, step_model=estimate_model_figures(signals.gpu, signals.pyspy, signals.host.main_cpu))
    assert signals.step_model.step_shares, "a py-spy estimate with GPU-Util has a step model"
    finding = diagnose(signals)
    assert finding.category == case["expected"], finding.evidence
