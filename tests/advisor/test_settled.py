"""Stopping a variant's measurement once its verdict is settled (measure.settled), on window rates recorded on an
H200: a clear win or a clear loss stops after 2-3 windows, a noisy near-tie measures on, and where it stops the
verdict is the one `beats` gives on the windows measured and on all of them."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence

import pytest
from advisor_support import REPO

from gpumon.advisor.measure import (
    MIN_GAIN,
    Measurement,
    Reference,
    StepLog,
    StepRecord,
    beats,
    measure_windows,
    measurement_from,
    settled,
)

RECORDED_RUNS = (
    "demo-guided-h200-2026-11-21.json",
    "demo-guided-h200-2026-11-23.json",
    "demo-ladder-h200-2026-11-27.json",
)
"""Guided demo runs on an H200 (benchmarks/results): every variant's window rates and whether it was kept."""

NUM_WORKERS_0_TO_14 = (1497.0, 1444.0, 1437.0, 1492.0, 1502.0)
"""samples/s of the 5 windows num_workers 0 -> 14 measured on an H200 on 2026-11-27 (the guided demo's 207 s run),
against a best of 411 samples/s."""
BASELINE_411 = Measurement(rates=(411.0 * 0.81, 411.0 * 1.19))
"""That best: its windows are not in the record, so its mean with the noise of the 2026-11-27 ladder's baseline
(benchmarks/results/demo-ladder-h200-2026-11-27.json: 369 samples/s ±19%)."""

CHANNELS_LAST_11_21 = Measurement(rates=(2438.19, 2547.7, 2594.06))
CUDNN_11_21 = (2778.77, 2260.93, 2640.26)
"""cudnn_benchmark against channels_last (2026-11-21): ±10%, a near-tie."""
CHANNELS_LAST_11_23 = Measurement(rates=(2397.01, 2484.75, 2404.03, 2405.45))
CUDNN_11_23 = (2229.53, 2231.2)
"""cudnn_benchmark against channels_last (2026-11-23): slower than the best, and steady."""
PIN_MEMORY_11_21 = Measurement(rates=(5964.74, 5983.98, 5994.93))
PERSISTENT_WORKERS_11_21 = (5947.09, 5972.19, 5665.16)
AMP_11_27 = Measurement(rates=(1850.99, 1852.76))
CHANNELS_LAST_11_27 = (2014.0, 2203.24, 2391.54, 2319.97, 2150.44)
"""channels_last against amp_bf16 (2026-11-27 ladder): a win of +20% whose windows range ±8.5%."""


def first_settled(rates: Sequence[float], best: Measurement) -> tuple[int, bool] | None:
    """(windows, verdict) at the first window count from 2 at which the verdict is settled, None if never."""
    for count in range(2, len(rates) + 1):
        verdict = settled(Measurement(rates=tuple(rates[:count])), Reference(best))
        if verdict is not None:
            return count, verdict
    return None


def test_num_workers_settles_as_a_win_after_two_windows() -> None:
    assert first_settled(NUM_WORKERS_0_TO_14, BASELINE_411) == (2, True)
    assert beats(Measurement(rates=NUM_WORKERS_0_TO_14[:2]), BASELINE_411)


def test_a_slower_steady_candidate_settles_as_no_win() -> None:
    assert first_settled(CUDNN_11_23, CHANNELS_LAST_11_23) == (2, False)
    assert first_settled(PERSISTENT_WORKERS_11_21, PIN_MEMORY_11_21) == (2, False)


def test_a_noisy_near_tie_stays_open() -> None:
    assert first_settled(CUDNN_11_21, CHANNELS_LAST_11_21) is None


def test_a_noisy_win_stays_open_until_its_interval_clears_the_margin() -> None:
    """+20% on the mean, but windows from 2,014 to 2,392: the lower bound of 4 windows' interval is under the best."""
    assert first_settled(CHANNELS_LAST_11_27, AMP_11_27) is None
    assert beats(Measurement(rates=CHANNELS_LAST_11_27), AMP_11_27)


def test_the_margin_is_the_one_beats_uses() -> None:
    best = Measurement(rates=(100.0, 100.0))
    steady = (110.0, 110.1, 109.9)
    assert settled(Measurement(rates=steady), Reference(best, min_gain=0.05)) is True
    assert settled(Measurement(rates=steady), Reference(best, min_gain=0.15)) is False  # can't reach +15%
    assert settled(Measurement(rates=(103.0, 103.6, 102.4)), Reference(best)) is None  # +3% +-1.5%: could go either way


def test_open_without_two_windows_a_rate_or_a_common_unit() -> None:
    best = Measurement(rates=(100.0, 101.0))
    assert settled(Measurement(rates=(500.0,)), Reference(best)) is None
    assert settled(Measurement(rates=(0.0, 0.0)), Reference(best)) is None
    assert settled(Measurement(rates=(500.0, 501.0), unit="steps/s"), Reference(best)) is None
    assert settled(Measurement(rates=(500.0, 501.0)), Reference(Measurement(rates=(0.0, 0.0)))) is None


def test_a_settled_verdict_is_what_beats_says_on_the_same_windows() -> None:
    draw = random.Random(24)
    decided = 0
    for _ in range(5000):
        best = Measurement(rates=tuple(draw.uniform(90, 110) for _ in range(draw.randint(2, 5))))
        centre, noise = draw.uniform(80, 140), draw.uniform(0.0, 0.15)
        rates = tuple(centre * (1 + draw.uniform(-noise, noise)) for _ in range(draw.randint(2, 5)))
        candidate = Measurement(rates=rates)
        verdict = settled(candidate, Reference(best))
        if verdict is not None:
            decided += 1
            assert verdict == beats(candidate, best), (rates, best.rates)
    assert decided > 1000, "the check above ran on settled cases"


def recorded_variants(name: str) -> list[tuple[str, tuple[float, ...], Measurement]]:
    """(label, window rates, the best so far) of each measured variant of a recorded guided run."""
    report = json.loads((REPO / "benchmarks" / "results" / name).read_text())
    best = Measurement(rates=tuple(report["baseline"]["measurement"]["rates"]))
    variants = []
    for variant in report["variants"]:
        if variant["measurement"] is None:
            continue
        rates = tuple(variant["measurement"]["rates"])
        variants.append((variant["label"], rates, best))
        if variant["kept"]:
            best = Measurement(rates=rates)
    return variants


@pytest.mark.parametrize("name", RECORDED_RUNS)
def test_stopping_when_settled_keeps_every_recorded_verdict(name: str) -> None:
    stopped_early = 0
    for label, rates, best in recorded_variants(name):
        stop = first_settled(rates, best)
        if stop is None:
            continue
        count, verdict = stop
        assert verdict == beats(Measurement(rates=rates), best), f"{label}: settled at {count} of {len(rates)}"
        stopped_early += count < len(rates)
    assert stopped_early >= 2, "the run has variants the rule stops early"


class RecordedWindows(StepLog):
    """Step records that time the n-th window measured at the n-th recorded rate: 3 steps of 1,000 samples each."""

    def __init__(self, rates: Sequence[float]) -> None:
        super().__init__()
        self.rates = list(rates)
        self.starts: dict[float, int] = {}

    def window(self, start: float, end: float) -> list[StepRecord]:
        index = self.starts.setdefault(start, len(self.starts))
        seconds = 3000 / self.rates[index]
        first = StepRecord(t=end, samples=1000, wall_ms=seconds * 1e3, data_ms=0.0)
        return [first, *(StepRecord(t=end, samples=1000, wall_ms=0.0, data_ms=0.0) for _ in range(2))]

    def last_t(self) -> float | None:
        return math.inf  # every record is in


def measure(rates: Sequence[float], against: Reference | None, said: list[str]) -> Measurement:
    began = time.monotonic()

    def clock() -> float:  # from 0, so a window's seconds are not rounded off a unix time
        return time.monotonic() - began

    windows = measure_windows(
        RecordedWindows(rates),
        window_s=0.01,
        repeats=len(rates),
        min_repeats=2,
        progress=lambda message, _fraction: said.append(message),
        label="variant",
        clock=clock,
        against=against,
    )
    return measurement_from(windows, gpu_util=None, sm_activity=None, tensor_activity=None, peak_memory=None)


def test_measuring_stops_at_the_window_that_settles_a_win() -> None:
    said: list[str] = []
    measured = measure(NUM_WORKERS_0_TO_14, Reference(BASELINE_411), said)
    assert measured.rates == pytest.approx(NUM_WORKERS_0_TO_14[:2], rel=1e-6)
    assert said[-1] == "variant: settled after 2 windows: a win beyond the noise"
    assert beats(measured, BASELINE_411)


def test_without_a_reference_the_same_windows_run_to_the_cap() -> None:
    """The baseline's rule: the rate's interval is not within ±3% before the fifth window."""
    said: list[str] = []
    measured = measure(NUM_WORKERS_0_TO_14, None, said)
    assert len(measured.rates) == 5
    assert [message for message in said if "window" in message][-1] == "variant: measuring window 5/5"


def test_measuring_stops_at_the_window_that_settles_a_loss() -> None:
    said: list[str] = []
    measured = measure(PERSISTENT_WORKERS_11_21, Reference(PIN_MEMORY_11_21, MIN_GAIN), said)
    assert len(measured.rates) == 2
    assert said[-1] == "variant: settled after 2 windows: no win (even its 95% interval stays under the best +3%)"
    assert not beats(measured, PIN_MEMORY_11_21)


def test_a_noisy_win_is_measured_to_the_cap() -> None:
    said: list[str] = []
    measured = measure(CHANNELS_LAST_11_27, Reference(AMP_11_27), said)
    assert measured.rates == pytest.approx(CHANNELS_LAST_11_27, rel=1e-6)
    assert not any("settled" in message or "steady" in message for message in said)
    assert beats(measured, AMP_11_27)


def test_a_steady_rate_still_stops_early_against_an_open_verdict() -> None:
    """+3.5% over the best, steady within ±0.2%: the rule of the baseline (the rate known within ±3%) stops it."""
    said: list[str] = []
    measured = measure((103.5, 103.6, 103.4, 103.5), Reference(Measurement(rates=(100.0, 100.0))), said)
    assert len(measured.rates) == 2
    assert said[-1].startswith("variant: steady after 2 windows: the rate within ±")
