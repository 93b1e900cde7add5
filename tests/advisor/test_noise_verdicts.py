"""Noise-aware verdicts on hand-made window figures: a win, no win, slower, and inconclusive where the spread is too
wide to decide (never "no win" there), with what would decide it; interleaved A/B/A windows cancel a drift."""

from __future__ import annotations

from advisor_support import FakeRunner, measurement

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun
from gpumon.advisor.measure import (
    INCONCLUSIVE,
    NO_WIN,
    SLOWER,
    WIN,
    decide,
    decide_interleaved,
    interleaved_order,
)
from gpumon.advisor.report import report_text

NUM_WORKERS = Experiment({"num_workers": 2}, previous={"num_workers": 0})


def test_a_clear_gain_on_quiet_windows_is_a_win() -> None:
    decision = decide(measurement(110, 111, 109), measurement(100, 101, 99))
    assert decision.outcome == WIN and round(decision.gain or 0, 2) == 0.10
    assert decision.text.startswith("a win beyond the noise (+10%")


def test_no_gain_on_quiet_windows_is_no_win_and_a_loss_is_slower() -> None:
    assert decide(measurement(101, 102, 100), measurement(100, 101, 99)).outcome == NO_WIN
    assert decide(measurement(80, 81, 79), measurement(100, 101, 99)).outcome == SLOWER


def test_windows_as_noisy_as_the_busy_two_core_run_are_inconclusive_not_no_win() -> None:
    """The demo on a busy 2-core machine: baseline 53.4 samples/s at ±91%; a candidate 20% faster cannot be told
    from it either way."""
    baseline = measurement(5.0, 101.8, 53.4)  # half the range: 48.4, ±91% of 53.4
    decision = decide(measurement(30, 98, 64), baseline)
    assert decision.outcome == INCONCLUSIVE
    assert "inconclusive: noise ±" in decision.text and "no win" not in decision.text
    assert "a quieter machine" in decision.text


def test_moderate_noise_says_how_many_windows_would_decide_it() -> None:
    decision = decide(measurement(104, 112, 96, 108), measurement(100, 106, 94, 100))
    assert decision.outcome == INCONCLUSIVE
    assert decision.windows_needed is not None and decision.windows_needed > 4
    assert f"--repeats {decision.windows_needed}" in decision.text


def test_an_inconclusive_row_is_not_kept_and_the_verdict_says_inconclusive_not_nothing_won() -> None:
    runner = FakeRunner(
        measurement(5.0, 101.8, 53.4),
        {frozenset({("num_workers", 2)}): measurement(40, 1940, 1000)},  # 18.6x, and ±95% of it
    )
    report = GuidedRun(runner, only=[NUM_WORKERS]).run()
    (row,) = report.variants
    word, reason = row.outcome()
    assert (word, row.kept) == ("inconclusive", False)
    assert reason.startswith("inconclusive: noise ±") and "(18.6x measured)" in reason
    assert report.verdict.startswith("inconclusive: num_workers 0 -> 2 measured 18.6x")
    assert "nothing won" not in report.verdict and "no win" not in report_text(report)
    assert report.stopped == "no knob left to try (1 without a verdict)"


def test_interleaved_windows_cancel_a_drift_that_sequential_windows_read_as_a_win() -> None:
    """The machine speeds up by 10 samples/s a window (a neighbour's job ending) while the candidate is no faster.
    Measured one after the other, the candidate reads +27%; interleaved A/B/A, each of its windows against the
    best's either side, it reads as it is."""
    drift = [100 + 10 * index for index in range(6)]
    sequential = decide(measurement(*drift[3:]), measurement(*drift[:3]))
    assert sequential.outcome == WIN, "the drift fools the sequential comparison"
    order = interleaved_order(3)
    assert order == ("A", "B", "A", "B", "A", "B", "A")
    windows = [(arm, 100.0 + 10 * index) for index, arm in enumerate(order)]
    interleaved = decide_interleaved(windows)
    assert interleaved.outcome == NO_WIN and abs(interleaved.gain or 0) < 0.01
    assert interleaved.drift_cancelled


def test_interleaved_windows_see_a_real_gain_through_the_drift() -> None:
    windows = [(arm, (100.0 + 10 * index) * (1.2 if arm == "B" else 1.0)) for index, arm in enumerate("ABABABA")]
    decision = decide_interleaved(windows)
    assert decision.outcome == WIN and 0.19 < (decision.gain or 0) < 0.21


def test_interleaved_windows_too_noisy_are_inconclusive() -> None:
    rates = [100, 150, 100, 60, 100, 140, 100]
    decision = decide_interleaved(list(zip("ABABABA", rates, strict=True)))
    assert decision.outcome == INCONCLUSIVE and "to decide" in decision.text
