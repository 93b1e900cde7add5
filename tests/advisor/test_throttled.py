"""The `throttled` finding, from the real H100 training recording (assets/recordings) with its GPU figures turned into
those of a busy GPU that slows itself down: no throttled GPU was at hand to record, so the throttle reasons,
temperatures and clocks are laid over real snapshots, and the Signals go through JSON as a recorded case does."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from advisor_support import REPO

from gpumon.advisor.catalogue import experiments_for
from gpumon.advisor.rules import ADVICE, CATEGORIES, HEALTHY, THROTTLED, Finding, diagnose
from gpumon.advisor.signals import Signals, build_signals
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

RECORDING = REPO / "assets" / "recordings" / "h100-training.jsonl"


def throttled_run(
    reasons: tuple[str, ...],
    share: float,
    clock: int,
    *,
    busy: bool = True,
    temperature: float = 87.0,
    power: float = 520.0,
) -> list[Snapshot]:
    """The recording with the first `share` of its snapshots throttled for `reasons` at `clock` MHz."""
    snapshots = read_recording(RECORDING)
    cut = round(len(snapshots) * share)
    changed = []
    for number, snapshot in enumerate(snapshots):
        throttled = number < cut
        gpus = tuple(
            replace(
                gpu,
                utilization_gpu=98.0 if busy else gpu.utilization_gpu,
                sm_activity=85.0 if busy else gpu.sm_activity,
                tensor_activity=60.0 if busy else gpu.tensor_activity,
                clock_sm_max=1980,
                clock_sm=clock if throttled else 1980,
                temperature=temperature if throttled else 70.0,
                power=power,
                throttle_reasons=reasons if throttled else (),
            )
            for gpu in snapshot.gpus
        )
        changed.append(replace(snapshot, gpus=gpus))
    return changed


def recorded(signals: Signals) -> Signals:
    """The signals written as a recorded case and read back."""
    return Signals.from_dict(json.loads(json.dumps(signals.to_dict())))


def test_a_busy_gpu_in_thermal_slowdown_is_throttled_with_evidence() -> None:
    signals = recorded(build_signals(throttled_run(("sw_thermal",), 0.62, 1410), None))

    finding = diagnose(signals)

    assert finding.category == THROTTLED and THROTTLED in CATEGORIES
    assert finding.evidence.startswith("thermal slowdown 62% of the window at 87 C; SM clock 1410 of 1980 MHz")
    assert "GPU-Util 98%" in finding.evidence
    assert finding.numbers["reason"] == "thermal" and finding.numbers["share"] == pytest.approx(0.62, abs=0.01)
    # about the share of the time lost: 62% of the window 29% slower
    assert finding.severity == pytest.approx(0.62 * (1 - 1410 / 1980), abs=0.01)
    assert finding.confidence == pytest.approx(0.8)
    assert finding.advice == ADVICE[THROTTLED] and "nothing to change in the training script" in finding.advice.lower()
    assert Finding.from_dict(json.loads(json.dumps(finding.to_dict()))).category == THROTTLED


def test_a_power_capped_gpu_far_below_its_clock_is_throttled_and_says_its_watts() -> None:
    signals = recorded(build_signals(throttled_run(("sw_power_cap", "hw_slowdown"), 0.9, 1200, power=700.0), None))
    finding = diagnose(signals)
    assert finding.category == THROTTLED
    assert "at 700 of 700 W" in finding.evidence and "SM clock 1200 of 1980 MHz" in finding.evidence


def test_a_gpu_at_its_power_cap_with_its_clock_nearly_full_is_not_a_problem() -> None:
    """H100s under load sit at sw_power_cap most of the time a few percent below the top clock: not worth naming."""
    signals = recorded(build_signals(throttled_run(("sw_power_cap",), 1.0, 1935), None))
    assert diagnose(signals).category == HEALTHY


def test_throttling_of_a_gpu_that_is_not_the_limit_is_not_named() -> None:
    """The recording's own GPU-Util (13-49%): the job waits elsewhere, so the clock is not what holds it back."""
    signals = recorded(build_signals(throttled_run(("hw_thermal",), 0.8, 1100, busy=False), None))
    assert signals.gpu_util is not None and signals.gpu_util < 60
    finding = diagnose(signals)
    assert THROTTLED not in {finding.category, *(f.category for f in finding.secondary)}


def test_the_hooks_gpu_share_also_makes_the_job_gpu_bound() -> None:
    signals = recorded(build_signals(throttled_run(("hw_thermal",), 0.8, 1100, busy=False), None))
    assert diagnose(replace(signals, gpu_share=0.9, data_share=0.02)).category == THROTTLED


def test_the_real_recording_as_it_is_shows_no_throttling() -> None:
    signals = build_signals(read_recording(RECORDING), None)
    (gpu,) = signals.gpus
    assert gpu.throttle_thermal == gpu.throttle_power == gpu.throttle_slowdown == 0.0
    assert diagnose(signals).category != THROTTLED


def test_no_knob_is_tried_for_throttling() -> None:
    signals = recorded(build_signals(throttled_run(("sw_thermal",), 0.62, 1410), None))
    finding = diagnose(signals)
    reasons = {experiment.reason for experiment in experiments_for(finding, signals)}
    assert THROTTLED not in reasons
