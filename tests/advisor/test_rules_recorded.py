"""The rules on signals recorded from real runs (tests/fixtures/advisor, see its README), and on the H100
recordings of assets/recordings (GPU figures only, no job data)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from advisor_support import REPO, case_files, load_case

from gpumon.advisor.categories import CATEGORIES, HEALTHY, INPUT_BOUND, IO_BOUND, UNEXPLAINED_IDLE
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import SOURCE_HOOK, SOURCE_PYSPY, Signals, build_signals
from gpumon.jobs.jobstate import replay_messages
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

CASES = case_files()


def test_there_are_recorded_cases() -> None:
    names = {path.name for path in CASES}
    assert {"demo-cpu.json", "demo_pyspy-cpu.json", "io_bound-cpu.json", "cpu_compute-cpu.json"} <= names


@pytest.mark.parametrize("path", CASES, ids=[path.stem for path in CASES])
def test_each_recorded_case_gets_its_category(path: Path) -> None:
    meta, signals = load_case(path)
    finding = diagnose(signals)
    assert finding.category == meta["expected"], f"{finding.category}: {finding.evidence}"
    assert finding.category in CATEGORIES
    assert 0.0 < finding.confidence <= 1.0
    assert finding.evidence and any(ch.isdigit() for ch in finding.evidence), "evidence carries numbers"


def test_input_bound_evidence_names_the_wait_the_loader_and_the_cores(demo_signals: Signals) -> None:
    finding = diagnose(demo_signals)
    assert finding.category == INPUT_BOUND and finding.source == SOURCE_HOOK
    share = round(demo_signals.step.data_share * 100)
    assert f"waits for data {share}% of each step" in finding.evidence
    assert "no DataLoader workers" in finding.evidence
    assert "cores idle" in finding.evidence
    assert finding.numbers["data_share"] == pytest.approx(demo_signals.step.data_share, abs=1e-3)


def test_the_py_spy_estimate_gives_the_same_finding_with_less_confidence(demo_signals: Signals) -> None:
    _, spied = load_case(REPO / "tests/fixtures/advisor/demo_pyspy-cpu.json")
    assert spied.source == SOURCE_PYSPY and spied.step.data_share is None
    hooked, estimated = diagnose(demo_signals), diagnose(spied)
    assert estimated.category == hooked.category == INPUT_BOUND
    assert estimated.confidence < hooked.confidence
    assert "py-spy samples" in estimated.evidence


def test_io_bound_is_told_from_input_bound_by_the_disk() -> None:
    _, signals = load_case(REPO / "tests/fixtures/advisor/io_bound-cpu.json")
    finding = diagnose(signals)
    assert finding.category == IO_BOUND
    assert "from disk" in finding.evidence
    # The same data wait without the reads and the waiting is plain input-bound.
    quiet = replace(signals, host=replace(signals.host, job_read_bytes_per_s=0.0, iowait=0.0, workers_in_disk_wait=0.0))
    assert diagnose(quiet).category == INPUT_BOUND


def test_a_job_computing_on_the_cpu_is_not_given_a_problem() -> None:
    _, signals = load_case(REPO / "tests/fixtures/advisor/cpu_compute-cpu.json")
    finding = diagnose(signals)
    assert finding.category == HEALTHY and signals.device == "cpu"
    assert signals.gpu.gpus == ()


@pytest.mark.parametrize("name", ["h100-demo-slow.jsonl", "h100-training.jsonl"])
def test_gpu_figures_alone_do_not_make_up_a_bottleneck(name: str) -> None:
    """Real H100 recordings with GPU-Util 13-49% but no job data: the GPU idles and nothing says why, so the idle is
    said as such (never healthy), at low confidence, with what would tell more."""
    snapshots = read_recording(REPO / "assets" / "recordings" / name)
    signals = build_signals(snapshots, None)
    assert signals.gpu.gpu_util is not None and signals.gpu.gpu_util < 60 and signals.has_gpm
    finding = diagnose(signals)
    assert finding.category == UNEXPLAINED_IDLE
    assert finding.confidence <= 0.5
    assert "no single cause owns it" in finding.evidence and "--native" in finding.evidence
    assert finding.severity == pytest.approx(1.0 - signals.gpu.gpu_util / 100.0, abs=1e-3)


def test_no_data_at_all_is_healthy_with_no_confidence() -> None:
    finding = diagnose(Signals.of())
    assert finding.category == HEALTHY and finding.confidence == 0.0
    assert "not enough data" in finding.evidence


def test_findings_round_trip_through_json(demo_signals: Signals) -> None:
    from gpumon.advisor.rules import Finding

    finding = diagnose(demo_signals)
    again = Finding.from_dict(finding.to_dict())
    assert again.category == finding.category and again.evidence == finding.evidence
    assert Signals.from_dict(demo_signals.to_dict()) == demo_signals


def test_a_cpu_job_syncing_every_step_gets_advice_that_fits_its_evidence() -> None:
    """A `.item()`-per-step job on the CPU: no GPU in use, so the advice must not say the GPU is busy."""
    meta, signals = load_case(REPO / "tests/fixtures/advisor/item_per_step-cpu.json")
    finding = diagnose(signals)
    assert finding.category == HEALTHY == meta["expected"] and signals.device == "cpu"
    assert "no GPU in use" in finding.evidence
    assert "GPU is busy" not in finding.advice and "computes on the CPU" in finding.advice
    again = Finding.from_dict(finding.to_dict())
    assert again.advice == finding.advice


def test_no_healthy_advice_says_the_gpu_is_busy_unless_the_evidence_does() -> None:
    for path in [*CASES, None]:
        signals = load_case(path)[1] if path is not None else Signals.of()
        finding = diagnose(signals)
        if finding.category == HEALTHY:
            assert ("GPU is busy" in finding.advice) == ("the GPU is busy" in finding.evidence), path


def with_startup(case: dict[str, Any], first_step_after_s: float) -> dict[str, Any]:
    """A recorded case whose main process stays at 30% CPU, whose job starts training `first_step_after_s` into the
    window, and which reads 100 MB/s from disk for the window's first 4 seconds."""
    case = copy.deepcopy(case)
    training_from = case["start"] + first_step_after_s
    for message in case["messages"]:
        if message["type"] == "steps":
            message["records"] = [r for r in message["records"] if r["t"] - r["wall_ms"] / 1e3 >= training_from]
    for snapshot in case["snapshots"]:
        for process in snapshot["processes"]:
            if process["pid"] == case["pid"]:
                reading = snapshot["timestamp"] <= case["start"] + 4.0
                process.update(read_bytes_per_s=100e6 if reading else 0.0, cpu_percent=30.0)
    return case


def signals_of(case: dict[str, Any]) -> Signals:
    view = replay_messages(case["messages"], pid=case["pid"]).view()
    snapshots = [Snapshot.from_dict(s) for s in case["snapshots"]]
    return build_signals(snapshots, view, pid=case["pid"], start=case["start"], end=case["end"])


def test_the_start_up_reads_before_the_first_step_are_left_out() -> None:
    """The first verdict on a job that had just imported torch said io_bound ("reads 41.9 MB/s", the import)."""
    case = json.loads((REPO / "tests/fixtures/advisor/input_bound-cpu.json").read_text())
    starting = signals_of(with_startup(case, first_step_after_s=4.0))
    assert starting.step.steps and starting.host.job_read_bytes_per_s == 0.0
    assert diagnose(starting).category == INPUT_BOUND
    # The same reads while the job trains are its own: I/O-bound.
    reading = signals_of(with_startup(case, first_step_after_s=0.0))
    assert reading.host.job_read_bytes_per_s is not None and reading.host.job_read_bytes_per_s > 20e6
    assert diagnose(reading).category == IO_BOUND
