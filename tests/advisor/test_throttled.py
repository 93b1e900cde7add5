"""The `throttled` finding, from the real H100 training recording (assets/recordings) with its GPU figures turned into
those of a busy GPU that slows itself down: no throttled GPU was at hand to record, so the throttle reasons,
temperatures and clocks are laid over real snapshots, and the Signals go through JSON as a recorded case does."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from advisor_support import REPO

from gpumon.advisor.catalogue import experiments_for
from gpumon.advisor.categories import ADVICE, CATEGORIES, HEALTHY, THROTTLED
from gpumon.advisor.rules import Finding, diagnose, rule_throttled
from gpumon.advisor.signals import SOURCE_HOOK, GpuSignals, Signals, build_signals
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
    power_limit: float = 700.0,
    power_limit_default: float | None = None,
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
                power_limit=power_limit,
                power_limit_default=power_limit_default,
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


def test_a_power_limit_set_below_the_cards_default_is_throttled_and_says_its_watts() -> None:
    """nvidia-smi -pl 400 on a 700 W card: the clocks it loses are lost to the lowered limit."""
    run = throttled_run(("sw_power_cap",), 0.9, 1200, power=398.0, power_limit=400.0, power_limit_default=700.0)
    signals = recorded(build_signals(run, None))
    (gpu,) = signals.gpu.gpus
    assert gpu.power_limit_default == pytest.approx(700.0)
    finding = diagnose(signals)
    assert finding.category == THROTTLED
    assert finding.evidence.startswith(
        "power cap 90% of the window at 398 of 400 W, lowered from the card's default 700 W; SM clock 1200 of 1980 MHz"
    )
    assert finding.numbers["reason"] == "power" and finding.numbers["power_limit_default"] == pytest.approx(700.0)


def h200_at_full_load(
    power_limit: float, power_limit_default: float | None, power: float = 693.0, **throttles: float
) -> Signals:
    """A bf16 job at full load on one H200, as recorded signals: the SM clock while capped is set low enough that the
    old rule (any power cap counted) named it `throttled` (severity 1.0 x 29% >= MIN_SEVERITY); watts as measured."""
    gpu = GpuSignals(
        index=0,
        name="NVIDIA H200",
        utilization=100.0,
        sm_activity=92.0,
        tensor_activity=55.0,
        throttle_thermal=throttles.get("thermal", 0.0),
        throttle_power=throttles.get("power", 1.0),
        throttle_slowdown=throttles.get("slowdown", 0.0),
        throttled_temperature=68.0,
        throttled_clock_sm=1400.0,
        clock_sm_max=1980.0,
        power=power,
        power_limit=power_limit,
        power_limit_default=power_limit_default,
    )
    signals = Signals.of(
        source=SOURCE_HOOK,
        device="cuda",
        gpus=(gpu,),
        gpu_util=100.0,
        sm_activity=92.0,
        tensor_activity=55.0,
        steps=400,
        data_share=0.01,
        gpu_share=0.97,
        autocast="bfloat16",
    )
    return recorded(signals)


def test_an_h200_at_its_default_power_limit_under_full_load_is_healthy_with_that_evidence() -> None:
    """`throttled` 0.8, "power cap 100% of the window at 693 of 700 W" on a well-built bf16 job; 700 W is
    that card's default limit, so the cap is the card running as built."""
    signals = h200_at_full_load(700.0, 700.0)
    assert rule_throttled(signals) is None
    finding = diagnose(signals)
    assert finding.category == HEALTHY and finding.confidence >= 0.8
    assert "at its power limit (693 of 700 W, the card's default) 100% of the window" in finding.evidence
    assert finding.evidence.startswith("the GPU is busy")


def test_a_power_cap_where_the_default_limit_is_unknown_is_not_a_problem_and_says_so() -> None:
    """An older recording or a driver without the default limit: nothing shows the limit was lowered."""
    finding = diagnose(h200_at_full_load(700.0, None))
    assert finding.category == HEALTHY
    assert "at its power limit (693 of 700 W; the card's default limit is unknown, so not counted as throttling)" in (
        finding.evidence
    )


def test_the_same_h200_with_its_limit_lowered_to_400_w_is_throttled() -> None:
    signals = h200_at_full_load(400.0, 700.0, power=398.0)
    finding = diagnose(signals)
    assert finding.category == THROTTLED
    assert "power cap 100% of the window at 398 of 400 W, lowered from the card's default 700 W" in finding.evidence
    assert "at its power limit" not in finding.evidence


def test_thermal_slowdown_counts_at_the_default_power_limit_too() -> None:
    finding = diagnose(h200_at_full_load(700.0, 700.0, thermal=0.6))
    assert finding.category == THROTTLED and finding.numbers["reason"] == "thermal"
    assert finding.evidence.startswith("thermal slowdown 60% of the window at 68 C; SM clock 1400 of 1980 MHz")


def test_a_hardware_slowdown_counts_at_the_default_power_limit_too() -> None:
    finding = diagnose(h200_at_full_load(700.0, 700.0, slowdown=0.8))
    assert finding.category == THROTTLED and finding.numbers["reason"] == "slowdown"


def test_the_external_power_brake_is_a_hardware_slowdown_not_the_power_limit() -> None:
    signals = recorded(build_signals(throttled_run(("hw_power_brake",), 0.5, 990, power_limit_default=700.0), None))
    (gpu,) = signals.gpu.gpus
    assert gpu.throttle_slowdown == pytest.approx(0.5, abs=0.01) and gpu.throttle_power == 0.0
    assert diagnose(signals).category == THROTTLED


def test_a_recording_without_the_default_limit_reads_it_as_unknown() -> None:
    (gpu,) = build_signals(read_recording(RECORDING), None).gpu.gpus
    assert gpu.power_limit == pytest.approx(700.0) and gpu.power_limit_default is None


def test_a_gpu_at_its_power_cap_with_its_clock_nearly_full_is_not_a_problem() -> None:
    """H100s under load sit at sw_power_cap most of the time a few percent below the top clock: not worth naming."""
    signals = recorded(build_signals(throttled_run(("sw_power_cap",), 1.0, 1935), None))
    assert diagnose(signals).category == HEALTHY


def test_throttling_of_a_gpu_that_is_not_the_limit_is_not_named() -> None:
    """The recording's own GPU-Util (13-49%): the job waits elsewhere, so the clock is not what holds it back."""
    signals = recorded(build_signals(throttled_run(("hw_thermal",), 0.8, 1100, busy=False), None))
    assert signals.gpu.gpu_util is not None and signals.gpu.gpu_util < 60
    finding = diagnose(signals)
    assert THROTTLED not in {finding.category, *(f.category for f in finding.secondary)}


def test_the_hooks_gpu_share_also_makes_the_job_gpu_bound() -> None:
    signals = recorded(build_signals(throttled_run(("hw_thermal",), 0.8, 1100, busy=False), None))
    assert diagnose(replace(signals, step=replace(signals.step, gpu_share=0.9, data_share=0.02))).category == THROTTLED


def test_the_real_recording_as_it_is_shows_no_throttling() -> None:
    signals = build_signals(read_recording(RECORDING), None)
    (gpu,) = signals.gpu.gpus
    assert gpu.throttle_thermal == gpu.throttle_power == gpu.throttle_slowdown == 0.0
    assert diagnose(signals).category != THROTTLED


def test_no_knob_is_tried_for_throttling() -> None:
    signals = recorded(build_signals(throttled_run(("sw_thermal",), 0.62, 1410), None))
    finding = diagnose(signals)
    reasons = {experiment.reason for experiment in experiments_for(finding, signals)}
    assert THROTTLED not in reasons
