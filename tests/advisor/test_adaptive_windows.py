"""Adaptive measuring on a step stream fed as a hook sends it: a steady job stops after 2 windows, a noisy one runs to
the cap, and the measurement says how many windows it took and how tight the rate is."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gpumon import protocol
from gpumon.advisor.measure import (
    TARGET_HALF_WIDTH,
    StepLog,
    measure_windows,
    measurement_from,
    relative_half_width,
)

WINDOW_S = 0.5


def stream(log: StepLog, step_s: Callable[[int], float], stop: threading.Event) -> None:
    """Step records of a job whose step n takes step_s(n) seconds (8 samples each), sent every 0.05 s."""
    seq, pending = 0, []
    last_send = time.monotonic()
    ended = time.time()  # each step's end on the job's own schedule, so a steady job is exactly steady
    while not stop.is_set():
        seq += 1
        wall = step_s(seq)
        ended += wall
        time.sleep(max(0.0, ended - time.time()))
        pending.append({"seq": seq, "t": ended, "wall_ms": wall * 1e3, "data_ms": 0.0, "samples": 8})
        if time.monotonic() - last_send >= 0.05:
            log({"type": protocol.STEPS, "records": pending})
            pending, last_send = [], time.monotonic()


@pytest.fixture
def job() -> Iterator[Callable[[Callable[[int], float]], StepLog]]:
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(step_s: Callable[[int], float]) -> StepLog:
        log = StepLog()
        thread = threading.Thread(target=stream, args=(log, step_s, stop), daemon=True)
        thread.start()
        threads.append(thread)
        time.sleep(0.3)
        return log

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def test_a_steady_job_is_measured_in_two_windows(job) -> None:  # type: ignore[no-untyped-def]
    log = job(lambda _n: 0.01)
    started = time.monotonic()
    windows = measure_windows(log, window_s=WINDOW_S, repeats=6, min_repeats=2)
    took = time.monotonic() - started
    measurement = measurement_from(windows, gpu_util=None, sm_activity=None, tensor_activity=None, peak_memory=None)
    assert len(windows) == 2, [w.samples_per_s for w in windows]
    assert took < 6 * WINDOW_S * 0.6, f"stopped early: {took:.2f} s"
    assert measurement.half_width is not None and measurement.half_width <= TARGET_HALF_WIDTH
    assert measurement.to_dict()["windows"] == 2
    assert measurement.rate == pytest.approx(800, rel=0.01), "8 samples per 10 ms step"


def test_a_noisy_job_is_measured_to_the_cap(job) -> None:  # type: ignore[no-untyped-def]
    # Window by window the step time jumps between 5 and 25 ms: the rate is not known within +-3% before the cap.
    phases = random.Random(1)
    slow = {"until": 0.0, "step": 0.01}

    def step_s(_n: int) -> float:
        now = time.monotonic()
        if now >= slow["until"]:
            slow["until"], slow["step"] = now + WINDOW_S, phases.choice((0.005, 0.025))
        return slow["step"]

    log = job(step_s)
    windows = measure_windows(log, window_s=WINDOW_S, repeats=5, min_repeats=2)
    rates = [w.samples_per_s or 0.0 for w in windows]
    assert len(windows) == 5, rates
    spread = relative_half_width(rates)
    assert spread is not None and spread > TARGET_HALF_WIDTH, "the result says how noisy it was"


def test_without_min_repeats_every_window_is_measured(job) -> None:  # type: ignore[no-untyped-def]
    log = job(lambda _n: 0.01)
    assert len(measure_windows(log, window_s=0.3, repeats=3)) == 3


def test_the_confidence_interval_of_the_mean() -> None:
    assert relative_half_width([100.0]) is None
    assert relative_half_width([100.0, 100.0]) == 0.0
    # Two windows 1% apart: t(1) = 12.7 makes that +-6.4%; five windows with the same spread are much tighter.
    two = relative_half_width([99.5, 100.5])
    assert two is not None and 0.06 < two < 0.07
    five = relative_half_width([99.5, 100.5, 99.5, 100.5, 100.0])
    assert five is not None and five < 0.01
