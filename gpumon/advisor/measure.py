"""Measuring a job over windows: the snapshots and step records the advisor keeps, and a variant's Measurement.

SnapshotLog keeps the sampler's snapshots (it is the sampler's callback, or fed by the app); StepLog keeps every
step record a job's hook streams (a JobClient message listener), so a window's samples/s counts every step, not
only the latest few the HookedView holds.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpumon import protocol
from gpumon.sampling.snapshot import Snapshot

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 7200
DIAGNOSIS_STEPS = 20
"""Steps of the hook's sync-counting window (`diagnose` request) after a measurement: diagnose, trial and live
runs all ask for this many."""
STEPS_KEPT = 500_000
MIN_GAIN = 0.03
"""A variant must beat the best so far by at least this share (and by more than the noise) to win."""
MIN_WINDOW_STEPS = 3
"""A measurement window is stretched (up to 3x) until this many steps ended in it."""
TARGET_HALF_WIDTH = 0.03
"""Adaptive measuring stops once the 95% confidence interval of the mean rate is within +-3% of it."""
RECORDS_IN_FLIGHT_S = 0.4
"""The longest a step record takes to arrive after its step (the hook sends every 0.2 s)."""
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t, two-sided 95%, for 1 to 10 degrees of freedom (1.96 beyond)."""


class SnapshotLog:
    """Thread-safe bounded list of snapshots; `__call__` makes it a Sampler callback."""

    def __init__(self, maxlen: int = SNAPSHOTS_KEPT) -> None:
        self._snapshots: deque[Snapshot] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def __call__(self, snapshot: Snapshot) -> None:
        self.add(snapshot)

    def add(self, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshots.append(snapshot)

    def between(self, start: float | None = None, end: float | None = None) -> list[Snapshot]:
        with self._lock:
            return [
                s
                for s in self._snapshots
                if (start is None or s.timestamp >= start) and (end is None or s.timestamp <= end)
            ]

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self._snapshots[-1] if self._snapshots else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._snapshots)


@dataclass(frozen=True, slots=True)
class StepRecord:
    t: float
    samples: int | None
    wall_ms: float
    data_ms: float


class StepLog:
    """Every step record of one job (a JobClient message listener); counts steps and samples over windows."""

    def __init__(self, maxlen: int = STEPS_KEPT) -> None:
        self._records: deque[StepRecord] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._last_seq = 0
        self.first_step_at: float | None = None
        """Monotonic time the first record arrived."""

    def __call__(self, message: Mapping[str, Any]) -> None:
        if message.get("type") != protocol.STEPS:
            return
        records = message.get("records")
        if not isinstance(records, list):
            return
        with self._lock:
            for record in records:
                try:
                    seq = int(record["seq"])
                    if seq <= self._last_seq:
                        continue
                    self._last_seq = seq
                    samples = record.get("samples")
                    self._records.append(
                        StepRecord(
                            t=float(record["t"]),
                            samples=None if samples is None else int(samples),
                            wall_ms=float(record.get("wall_ms") or 0.0),
                            data_ms=float(record.get("data_ms") or 0.0),
                        )
                    )
                except (KeyError, TypeError, ValueError):
                    continue
            if self._records and self.first_step_at is None:
                self.first_step_at = time.monotonic()

    @property
    def steps(self) -> int:
        with self._lock:
            return len(self._records)

    def window(self, start: float, end: float) -> list[StepRecord]:
        with self._lock:
            return [r for r in self._records if start <= r.t <= end]

    def last_t(self) -> float | None:
        with self._lock:
            return self._records[-1].t if self._records else None


@dataclass(frozen=True, slots=True)
class WindowRate:
    start: float
    end: float
    steps: int
    samples: int | None

    @property
    def seconds(self) -> float:
        return max(1e-9, self.end - self.start)

    @property
    def samples_per_s(self) -> float | None:
        return None if self.samples is None else self.samples / self.seconds

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


def window_rate(log: StepLog, start: float, end: float) -> WindowRate:
    """The steps that ended within [start, end], timed from the boundary before the first of them to the end of
    the last, so a window holding few long steps is not off by a fraction of a step."""
    records = log.window(start, end)
    counts = [r.samples for r in records if r.samples is not None]
    samples = sum(counts) if len(counts) == len(records) else None  # no step at all: 0 samples (a stall)
    if records:
        start, end = records[0].t - records[0].wall_ms / 1e3, records[-1].t
    return WindowRate(start=start, end=end, steps=len(records), samples=samples)


@dataclass(frozen=True, slots=True)
class Measurement:
    """A variant's steady state over `windows` measured windows (warm-up excluded)."""

    rates: tuple[float, ...]
    """samples/s of each window (steps/s where the batch size is unknown: see `unit`)."""
    unit: str = "samples/s"
    gpu_util: float | None = None
    sm_activity: float | None = None
    tensor_activity: float | None = None
    peak_memory: int | None = None
    mfu: float | None = None
    """Model FLOPs utilization: the hook's FLOPs per step x steps/s over a spec-sheet dense peak (0-1)."""
    joules_per_sample: float | None = None
    """The job's GPUs' energy (NVML's counter) per sample trained."""
    steps: int = 0
    seconds: float = 0.0
    windows: tuple[WindowRate, ...] = field(default=(), repr=False)
    stopped: str = ""
    """Why its windows stopped before the plan's most (a settled verdict, a steady rate); empty when they ran to it."""

    @property
    def rate(self) -> float:
        return statistics.fmean(self.rates) if self.rates else 0.0

    @property
    def spread(self) -> float:
        """Half the range of the window rates: the noise of this measurement."""
        return (max(self.rates) - min(self.rates)) / 2 if len(self.rates) > 1 else 0.0

    @property
    def noise(self) -> float:
        """The spread as a share of the rate."""
        return self.spread / self.rate if self.rate > 0 else 0.0

    @property
    def half_width(self) -> float | None:
        """The 95% confidence interval of the mean rate, +- this share of it (None under 2 windows)."""
        return relative_half_width(self.rates)

    def to_dict(self) -> dict[str, Any]:
        half_width = self.half_width
        return {
            "rate": round(self.rate, 2),
            "unit": self.unit,
            "spread": round(self.spread, 2),
            "noise": round(self.noise, 4),
            "windows": len(self.rates),
            "half_width": None if half_width is None else round(half_width, 4),
            "rates": [round(r, 2) for r in self.rates],
            "gpu_util": _r(self.gpu_util),
            "sm_activity": _r(self.sm_activity),
            "tensor_activity": _r(self.tensor_activity),
            "peak_memory": self.peak_memory,
            "mfu": None if self.mfu is None else round(self.mfu, 4),
            "joules_per_sample": None if self.joules_per_sample is None else round(self.joules_per_sample, 6),
            "steps": self.steps,
            "seconds": round(self.seconds, 2),
            "stopped": self.stopped,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        return cls(
            rates=tuple(float(r) for r in data.get("rates") or ()),
            unit=str(data.get("unit", "samples/s")),
            gpu_util=data.get("gpu_util"),
            sm_activity=data.get("sm_activity"),
            tensor_activity=data.get("tensor_activity"),
            peak_memory=data.get("peak_memory"),
            mfu=data.get("mfu"),
            joules_per_sample=data.get("joules_per_sample"),
            steps=int(data.get("steps") or 0),
            seconds=float(data.get("seconds") or 0.0),
            stopped=str(data.get("stopped") or ""),
        )


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def relative_half_width(rates: Sequence[float]) -> float | None:
    """Half the 95% confidence interval of the mean of `rates` (Student's t), as a share of that mean."""
    if len(rates) < 2:
        return None
    mean = statistics.fmean(rates)
    if mean <= 0:
        return None
    degrees = len(rates) - 1
    t = T_975[degrees - 1] if degrees <= len(T_975) else 1.96
    return t * statistics.stdev(rates) / math.sqrt(len(rates)) / mean


def beats(candidate: Measurement, best: Measurement, min_gain: float = MIN_GAIN) -> bool:
    """True when `candidate` is faster than `best` beyond the noise of both and by at least `min_gain`."""
    if candidate.unit != best.unit or best.rate <= 0:
        return candidate.rate > 0 and best.rate <= 0
    return candidate.rate - best.rate > _winning_margin(candidate, best, min_gain)


def _winning_margin(candidate: Measurement, best: Measurement, min_gain: float) -> float:
    """How far above `best` a candidate's rate must be to win: `min_gain` of it, and more than both spreads."""
    return max(min_gain * best.rate, candidate.spread + best.spread)


@dataclass(frozen=True, slots=True)
class Reference:
    """What a candidate is measured against in a guided run: the best measurement so far, and the least gain a win
    needs (`beats`)."""

    best: Measurement
    min_gain: float = MIN_GAIN


def settled(candidate: Measurement, reference: Reference) -> bool | None:
    """Whether the verdict of `beats(candidate, reference.best)` is settled, so more windows would not change it
    (at 95% confidence): True a settled win, False a settled no-win, None while it is open.

    The mechanism: the candidate's true mean rate lies, at 95%, within the confidence interval of its windows so far
    (Student's t, `relative_half_width`). A win is settled when even the interval's lower bound beats the best by
    the margin `beats` uses (min_gain of the best's rate, and more than the candidate's spread so far plus the
    best's); a no-win when even its upper bound does not reach the best's rate plus min_gain, the least any win
    needs. The mean lies within its interval, so `beats` on the windows so far gives the same verdict. Open under
    2 windows, for a stalled candidate (no rate), and where the units differ (a window without a batch size)."""
    best = reference.best
    half_width = candidate.half_width
    if half_width is None or candidate.unit != best.unit or best.rate <= 0:
        return None
    lowest, highest = candidate.rate * (1 - half_width), candidate.rate * (1 + half_width)
    if lowest - best.rate > _winning_margin(candidate, best, reference.min_gain):
        return True
    if highest <= best.rate * (1 + reference.min_gain):
        return False
    return None


DECISIVE_NOISE = 0.10
"""A "no win" or "slower" verdict needs the two measurements' noise, added, under this share: wider, a win of that
size could hide in it, and the verdict is inconclusive."""
MOST_WINDOWS_OFFERED = 20
"""More windows than this per variant are not offered as what would decide an inconclusive verdict: a quieter
machine is."""
WIN = "win"
NO_WIN = "no_win"
SLOWER = "slower"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (WIN, NO_WIN, SLOWER, INCONCLUSIVE)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a candidate's windows say against the best so far: a win, no win, slower, or inconclusive (the noise
    too wide to tell), with the measured gain and the noise it was judged in."""

    outcome: str
    gain: float | None
    """The candidate's rate over the best's, less 1 (None where they cannot be compared)."""
    noise: float
    """The wider of the two measurements' noise (half the range of its windows, as a share of its rate)."""
    windows_needed: int | None = None
    """Inconclusive: about how many windows per variant would decide it (None: more windows would not soon)."""
    drift_cancelled: bool = False
    """Judged on interleaved windows (A/B/A), each candidate window against the best's on either side of it."""

    @property
    def text(self) -> str:
        """The row's reason: 'a win beyond the noise (+12%, noise ±2%)', 'inconclusive: noise ±91% (18.5x
        measured); to decide: ...'."""
        noise = f"noise ±{self.noise:.0%}"
        measured = f"{gain_text(self.gain)}, {noise}" if self.gain is not None else noise
        if self.outcome == WIN:
            return f"a win beyond the noise ({measured})"
        if self.outcome == NO_WIN:
            return f"no win ({measured}): under the {MIN_GAIN:.0%} a win needs, or inside the noise"
        if self.outcome == SLOWER:
            return f"slower beyond the noise ({measured})"
        seen = f" ({gain_text(self.gain)} measured)" if self.gain is not None else ""
        return f"inconclusive: {noise}{seen}; to decide: {self.to_decide}"

    @property
    def to_decide(self) -> str:
        """What would decide an inconclusive verdict."""
        if self.windows_needed is not None:
            count = self.windows_needed
            return f"more windows (about {count} a variant: --repeats {count}), or a quieter machine"
        return "a quieter machine (the windows vary too much for more of them to settle it soon)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "gain": None if self.gain is None else round(self.gain, 4),
            "noise": round(self.noise, 4),
            "windows_needed": self.windows_needed,
            "drift_cancelled": self.drift_cancelled,
            "text": self.text,
        }


def gain_text(gain: float | None) -> str:
    """A gain as a change ('+12%', '-5%') or, from twice the rate up, a factor ('18.5x')."""
    if gain is None:
        return "-"
    return f"{1 + gain:.1f}x" if gain >= 1 else f"{gain:+.0%}"


def decide(candidate: Measurement, best: Measurement, min_gain: float = MIN_GAIN) -> Decision:
    """The verdict on `candidate` against `best`. A win is `beats`; "no win" and "slower" only where the noise of
    both (each half its windows' range over its rate), added, is under DECISIVE_NOISE, so a win that size could not
    hide in it; otherwise inconclusive, never "no win"."""
    if candidate.unit != best.unit or best.rate <= 0:
        won = beats(candidate, best, min_gain)
        return Decision(WIN if won else INCONCLUSIVE, None, 0.0, None if won else MOST_WINDOWS_OFFERED)
    gain = candidate.rate / best.rate - 1
    noise = max(candidate.noise, best.noise)
    if beats(candidate, best, min_gain):
        return Decision(WIN, gain, noise)
    if candidate.noise + best.noise > DECISIVE_NOISE:
        needed = windows_needed((candidate.rates, best.rates), best.rate, min_gain)
        return Decision(INCONCLUSIVE, gain, noise, needed)
    return Decision(SLOWER if beats(best, candidate, min_gain) else NO_WIN, gain, noise)


def windows_needed(samples: Sequence[Sequence[float]], scale: float, min_gain: float = MIN_GAIN) -> int | None:
    """About how many windows a variant would need for the 95% interval of its mean to be within +-`min_gain` of
    `scale` (the best's rate), at the windows' scatter so far (each of `samples` a variant's rates, their
    variances pooled); None beyond MOST_WINDOWS_OFFERED, where a quieter machine is what would decide it."""
    spreads = [statistics.variance(rates) for rates in samples if len(rates) > 1]
    if not spreads or scale <= 0:
        return None
    relative = math.sqrt(statistics.fmean(spreads)) / scale
    needed = math.ceil((1.96 * relative / min_gain) ** 2)
    longest = max(len(rates) for rates in samples)
    return max(needed, longest + 1) if needed <= MOST_WINDOWS_OFFERED else None


A = "A"
B = "B"
"""The two arms of an interleaved comparison: A the best so far, B the candidate."""


def interleaved_order(candidate_windows: int) -> tuple[str, ...]:
    """The order of an interleaved measurement: A/B/A/B/.../A, every candidate window between two of the best's,
    so a drift of the machine (a neighbour's load rising, a disk cache warming) moves both arms alike."""
    return (A, *(arm for _ in range(candidate_windows) for arm in (B, A)))


def decide_interleaved(windows: Sequence[tuple[str, float]], min_gain: float = MIN_GAIN) -> Decision:
    """The verdict on interleaved windows ((arm, rate) in time order, as `interleaved_order`): each B window over
    the mean of the A windows beside it, so a linear drift cancels; the gain is the mean of those ratios, less 1,
    and the noise half their range. Decided as `decide`: a win beyond the noise and `min_gain`, "no win" or
    "slower" only where the noise is under DECISIVE_NOISE, else inconclusive."""
    ratios = []
    for index, (arm, rate) in enumerate(windows):
        if arm != B:
            continue
        beside = [windows[i][1] for i in (index - 1, index + 1) if 0 <= i < len(windows) and windows[i][0] == A]
        if beside and statistics.fmean(beside) > 0:
            ratios.append(rate / statistics.fmean(beside))
    if len(ratios) < 2:  # one ratio has no noise to judge it by
        gain = statistics.fmean(ratios) - 1 if ratios else None
        return Decision(INCONCLUSIVE, gain, 0.0, 2, drift_cancelled=True)
    gain = statistics.fmean(ratios) - 1
    noise = (max(ratios) - min(ratios)) / 2
    if gain > max(min_gain, noise):
        return Decision(WIN, gain, noise, drift_cancelled=True)
    if noise > DECISIVE_NOISE:
        return Decision(INCONCLUSIVE, gain, noise, windows_needed((ratios,), 1.0, min_gain), drift_cancelled=True)
    outcome = SLOWER if -gain > max(min_gain, noise) else NO_WIN
    return Decision(outcome, gain, noise, drift_cancelled=True)


def speedup(measurement: Measurement | None, baseline: Measurement | None) -> float | None:
    if measurement is None or baseline is None or baseline.rate <= 0 or measurement.unit != baseline.unit:
        return None
    return measurement.rate / baseline.rate


class Cancelled(Exception):
    """The experiment was cancelled (the user quit or pressed the key again)."""


Progress = Callable[[str, float], None]
"""Called with a message and the fraction (0-1) of the current variant done."""


def sleep_checked(
    seconds: float, cancel: threading.Event | None, alive: Callable[[], str | None] | None = None, tick: float = 0.1
) -> None:
    """Sleep `seconds`, raising Cancelled when `cancel` is set and RuntimeError(reason) when `alive()` returns
    a reason (the job died)."""
    deadline = time.monotonic() + seconds
    while True:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled")
        if alive is not None:
            reason = alive()
            if reason is not None:
                raise RuntimeError(reason)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(tick, left))


def measure_windows(
    log: StepLog,
    *,
    window_s: float,
    repeats: int,
    min_repeats: int | None = None,
    target: float = TARGET_HALF_WIDTH,
    cancel: threading.Event | None = None,
    alive: Callable[[], str | None] | None = None,
    progress: Progress | None = None,
    label: str = "",
    clock: Callable[[], float] = time.time,
    done_before: float = 0.0,
    share: float = 1.0,
    against: Reference | None = None,
) -> list[WindowRate]:
    """Measure consecutive windows of `window_s` seconds of the job's steps (wall-clock unix time): `repeats` of
    them, or, with `min_repeats`, as few as that once the rates' 95% confidence interval is within +-`target`
    of their mean (adaptive: a steady job stops early, a noisy one runs to `repeats`), or, measured `against` the
    best so far, once the verdict is settled (`settled`). Progress says why it stopped early."""
    least = repeats if min_repeats is None else max(2, min(min_repeats, repeats))
    windows: list[WindowRate] = []
    start = clock()
    for index in range(repeats):
        if progress is not None:
            progress(f"{label}: measuring window {index + 1}/{repeats}", done_before + share * index / repeats)
        sleep_checked(max(0.0, start + window_s - clock()), cancel, alive)
        # Slow steps: stretch the window (up to 3x) until it holds a few of them.
        stretch_until = start + 3 * window_s
        while len(log.window(start, clock())) < MIN_WINDOW_STEPS and clock() < stretch_until:
            sleep_checked(0.1, cancel, alive)
        end = clock()
        # Records of steps that ended by `end` may still be in flight: they have all come once a later one has.
        flushed_by = time.monotonic() + RECORDS_IN_FLIGHT_S
        while ((last := log.last_t()) is None or last < end) and time.monotonic() < flushed_by:
            sleep_checked(0.05, cancel, None)
        windows.append(window_rate(log, start, end))
        start = end
        if len(windows) >= least and index + 1 < repeats:
            reason = early_stop(windows, target, against)
            if reason is not None:
                if progress is not None:
                    progress(f"{label}: {reason}", done_before + share)
                break
    return windows


def early_stop(windows: Sequence[WindowRate], target: float, against: Reference | None) -> str | None:
    """Why measuring can stop after `windows` (None: measure on): the verdict against the best so far is settled,
    or the mean rate is known within +-`target`."""
    candidate = Measurement(rates=tuple(window_rates(windows)), unit=window_unit(windows))
    if against is not None and (verdict := settled(candidate, against)) is not None:
        outcome = (
            "a win beyond the noise"
            if verdict
            else f"no win (even its 95% interval stays under the best +{against.min_gain:.0%})"
        )
        return f"settled after {len(windows)} windows: {outcome}"
    half_width = candidate.half_width
    if half_width is not None and half_width <= target:
        return f"steady after {len(windows)} windows: the rate within ±{half_width:.1%}"
    return None


def window_unit(windows: Sequence[WindowRate]) -> str:
    """samples/s where every window knows its samples, steps/s where one does not."""
    return "samples/s" if windows and all(w.samples is not None for w in windows) else "steps/s"


def window_rates(windows: Sequence[WindowRate]) -> list[float]:
    """Each window's rate in `window_unit(windows)`: samples/s, or steps/s where a window's samples are unknown."""
    if window_unit(windows) == "samples/s":
        return [float(rate) for w in windows if (rate := w.samples_per_s) is not None]
    return [w.steps_per_s for w in windows]


def measurement_from(
    windows: Sequence[WindowRate],
    *,
    gpu_util: float | None,
    sm_activity: float | None,
    tensor_activity: float | None,
    peak_memory: int | None,
    stopped: str = "",
) -> Measurement:
    return Measurement(
        rates=tuple(window_rates(windows)),
        unit=window_unit(windows),
        gpu_util=gpu_util,
        sm_activity=sm_activity,
        tensor_activity=tensor_activity,
        peak_memory=peak_memory,
        steps=sum(w.steps for w in windows),
        seconds=sum(w.seconds for w in windows),
        windows=tuple(windows),
        stopped=stopped,
    )


@dataclass(frozen=True, slots=True)
class MeasurementPlan:
    """How a variant is measured, one plan for trial and live runs alike: `warmup_s` seconds, then `repeats` windows
    of `window_s` (as few as `min_repeats` once the rate's interval is tight or, measured against the best so far,
    once the verdict is settled), then, with `count_syncs`, the hook's sync count over DIAGNOSIS_STEPS steps."""

    warmup_s: float
    window_s: float = 4.0
    repeats: int = 3
    min_repeats: int | None = None
    count_syncs: bool = True

    def windows(
        self,
        log: StepLog,
        *,
        cancel: threading.Event | None,
        alive: Callable[[], str | None] | None,
        progress: Progress | None,
        label: str,
        done_before: float,
        share: float,
        against: Reference | None = None,
    ) -> list[WindowRate]:
        return measure_windows(
            log,
            window_s=self.window_s,
            repeats=self.repeats,
            min_repeats=self.min_repeats,
            cancel=cancel,
            alive=alive,
            progress=progress,
            label=label,
            done_before=done_before,
            share=share,
            against=against,
        )

    def why_stopped(self, windows: Sequence[WindowRate], against: Reference | None = None) -> str:
        """Why `windows` (measured by `windows()`) stopped before `repeats`: early_stop's reason; empty when they
        ran to it."""
        if len(windows) >= self.repeats:
            return ""
        return early_stop(windows, TARGET_HALF_WIDTH, against) or ""

    def sync_count(self, diagnose: Callable[..., protocol.Diagnosis]) -> protocol.Diagnosis | None:
        """The hook's sync count (`diagnose` is the client's), None when it could not be had: optional evidence."""
        try:
            return diagnose(DIAGNOSIS_STEPS, timeout=max(10.0, self.window_s * 3))
        except Exception:  # the sync count is optional evidence
            log.info("the hook's sync count could not be had", exc_info=True)
            return None
