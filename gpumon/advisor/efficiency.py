"""MFU and energy per sample: the hook's FLOP count of a sampled step against a spec-sheet dense peak, and NVML's
total-energy counter against the samples the job trained meanwhile.

MFU = flops_per_step x steps/s / peak, per GPU (a DDP job's ranks each count their own step). Energy: each GPU's
counter (joules since the driver loaded) is read with the health fields (every 10 s: the call costs ~4 ms); the
power over a span is the difference of its first and last fresh readings (a reading that changed) over the time
between them, summed over the job's GPUs; joules per sample = that power / samples per second. A span too short
for two fresh readings (a 12 s experiment window may hold one) falls back to the mean sampled power draw, and
says so (`PowerSpan.source`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from gpumon import protocol
from gpumon.advisor.measure import Measurement
from gpumon.advisor.peak_flops import blended_peak, gpu_peaks, job_precision
from gpumon.advisor.signals import Signals
from gpumon.jobs.jobstate import HookedView
from gpumon.jobs.step_sums import window_sums
from gpumon.sampling.snapshot import Snapshot

ENERGY_SPAN_S = 60.0
"""The job view's power: over the energy readings of the last this many seconds."""
SOURCE_COUNTER = "energy counter"
SOURCE_POWER = "power draw"
ENERGY_KEPT = 600
"""Snapshots' energy readings the job view keeps (10 minutes at the default interval)."""


@dataclass(frozen=True, slots=True)
class Mfu:
    """A job's model FLOPs utilization, or why there is none (`value` None, `reason` set)."""

    value: float | None = None
    """Achieved / peak, 0-1."""
    achieved: float | None = None
    """FLOP/s: flops_per_step x steps/s."""
    peak: float | None = None
    """FLOP/s: the spec-sheet dense peak of `gpu` at `precision`."""
    gpu: str = ""
    precision: str = ""
    flops_per_step: int | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class PowerSpan:
    """Mean power of a job's GPUs from their energy counters, over [start, end] (unix time)."""

    watts: float
    start: float
    end: float
    gpus: int
    source: str = SOURCE_COUNTER
    """SOURCE_COUNTER (NVML's total-energy counter) or SOURCE_POWER (mean of the sampled power draw)."""

    @property
    def seconds(self) -> float:
        return self.end - self.start


def flop_count(view: HookedView) -> protocol.FlopCount | None:
    """The hook's latest FLOP count (state.flops), None before the first."""
    return view.state.get("flops") if view.state is not None else None


def device_name(view: HookedView) -> str | None:
    """The CUDA name of the GPU the job's steps run on ("NVIDIA H200"), None on a CPU job or before CUDA."""
    cuda = view.cuda
    devices = cuda.get("devices") or []
    device = cuda.get("device")
    chosen = [d for d in devices if d.get("index") == device] if device is not None else devices[:1]
    return chosen[0].get("name") if chosen else None


def mfu(flops_per_step: float, steps_per_s: float, peak: float) -> float:
    return flops_per_step * steps_per_s / peak


def job_mfu(view: HookedView, steps_per_s: float | None = None) -> Mfu:
    """The job's MFU at `steps_per_s` (default: the view's rolling rate)."""
    count = flop_count(view)
    if count is None:
        return Mfu(reason="no FLOP count yet (the hook counts step 30)")
    if not count.get("available"):
        return Mfu(reason=f"FLOPs not counted: {count.get('reason') or 'unknown'}")
    flops = count.get("flops_per_step") or 0
    if flops <= 0:
        return Mfu(reason="the counted step had no matmul, convolution or attention")
    rate = view.stats.steps_per_s if steps_per_s is None else steps_per_s
    achieved = None if rate is None else flops * rate
    name = device_name(view)
    if name is None:
        return Mfu(achieved=achieved, flops_per_step=flops, reason="no GPU (a CPU job, or CUDA not initialized)")
    peaks = gpu_peaks(name)
    precision = job_precision(view.precision)
    if peaks is None:
        reason = "GPU not in the peak table"
        return Mfu(achieved=achieved, flops_per_step=flops, gpu=name, precision=precision, reason=reason)
    peak, precision = blended_peak(peaks, view.precision, flops, count.get("conv_flops_per_step") or 0)
    value = None if rate is None else mfu(flops, rate, peak)
    return Mfu(
        value=value,
        achieved=achieved,
        peak=peak,
        gpu=peaks.model,
        precision=precision,
        flops_per_step=flops,
        reason="" if value is not None else "no step rate yet",
    )


def counter_power(readings: Sequence[tuple[float, float | None]]) -> tuple[float, float, float] | None:
    """(start, end, joules) between the first and last fresh readings of one energy counter: a reading is fresh
    where its value changed from the one before (the counter is read less often than snapshots are taken)."""
    fresh: list[tuple[float, float]] = []
    previous: float | None = None
    for t, joules in readings:
        if joules is None:
            continue
        if previous is not None and joules != previous:
            fresh.append((t, joules))
        previous = joules
    if len(fresh) < 2 or fresh[-1][0] <= fresh[0][0] or fresh[-1][1] < fresh[0][1]:
        return None  # too few readings, or the counter went back (a driver reload)
    return fresh[0][0], fresh[-1][0], fresh[-1][1] - fresh[0][1]


def combined_power(counters: Iterable[Sequence[tuple[float, float | None]]]) -> PowerSpan | None:
    """The summed power of several GPUs' counters; None when any of them lacks two fresh readings."""
    spans = []
    for readings in counters:
        span = counter_power(readings)
        if span is None:
            return None
        spans.append(span)
    if not spans:
        return None
    watts = sum(joules / (end - start) for start, end, joules in spans)
    return PowerSpan(watts=watts, start=min(s[0] for s in spans), end=max(s[1] for s in spans), gpus=len(spans))


def mean_power(samples: Iterable[Sequence[tuple[float, float | None]]]) -> PowerSpan | None:
    """The summed mean sampled power draw of several GPUs; None when any of them has no reading."""
    watts = 0.0
    times: list[float] = []
    count = 0
    for readings in samples:
        values = [w for _, w in readings if w is not None]
        if not values:
            return None
        watts += sum(values) / len(values)
        times += [t for t, w in readings if w is not None]
        count += 1
    if not count or max(times) <= min(times):
        return None
    return PowerSpan(watts=watts, start=min(times), end=max(times), gpus=count, source=SOURCE_POWER)


def snapshot_power(snapshots: Sequence[Snapshot], indices: Sequence[int]) -> PowerSpan | None:
    """The power of GPUs `indices` over `snapshots`: from their energy counters, else their sampled power draw."""
    energy: list[list[tuple[float, float | None]]] = []
    power: list[list[tuple[float, float | None]]] = []
    for index in indices:
        energy.append([])
        power.append([])
        for snapshot in snapshots:
            gpu = next((g for g in snapshot.gpus if g.index == index), None)
            energy[-1].append((snapshot.timestamp, None if gpu is None else gpu.energy_total))
            power[-1].append((snapshot.timestamp, None if gpu is None else gpu.power))
    return combined_power(energy) or mean_power(power)


def joules_per_sample(power: PowerSpan | None, samples_per_s: float | None) -> float | None:
    if power is None or not samples_per_s or samples_per_s <= 0:
        return None
    return power.watts / samples_per_s


def with_efficiency(
    measurement: Measurement, snapshots: Sequence[Snapshot], signals: Signals, view: HookedView | None
) -> Measurement:
    """`measurement` with its MFU (steps/s over its windows, the job's FLOP count) and joules per sample (its
    GPUs' energy counters over `snapshots`, its samples/s)."""
    value = None
    if view is not None and measurement.seconds > 0 and measurement.steps:
        value = job_mfu(view, measurement.steps / measurement.seconds).value
    joules = None
    if measurement.unit == "samples/s" and signals.gpu.gpus:
        power = snapshot_power(snapshots, [gpu.index for gpu in signals.gpu.gpus])
        joules = joules_per_sample(power, measurement.rate)
    return replace(measurement, mfu=value, joules_per_sample=joules)


class EnergyLog:
    """The energy counters of recent snapshots by GPU uuid, for the job view (thread-safe, bounded)."""

    def __init__(self, maxlen: int = ENERGY_KEPT) -> None:
        self._readings: deque[tuple[float, dict[str, tuple[float | None, float | None, float | None]]]] = deque(
            maxlen=maxlen
        )
        self._gpus_of: dict[int, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def add(self, snapshot: Snapshot) -> None:
        readings = {gpu.uuid: (gpu.energy_total, gpu.power, gpu.utilization_gpu) for gpu in snapshot.gpus if gpu.uuid}
        uuid_of = {gpu.index: gpu.uuid for gpu in snapshot.gpus if gpu.uuid}
        gpus_of = {
            process.pid: tuple(uuid_of[i] for i in process.gpu_indices if i in uuid_of)
            for process in snapshot.processes
            if process.gpu_indices
        }
        with self._lock:
            if self._readings and self._readings[-1][0] >= snapshot.timestamp:
                return  # the same snapshot shown again (a resize), or an older one
            self._readings.append((snapshot.timestamp, readings))
            self._gpus_of = gpus_of

    def gpus_of(self, pid: int) -> tuple[str, ...]:
        """UUIDs of the GPUs process `pid` holds memory on in the newest snapshot (several for DataParallel)."""
        with self._lock:
            return self._gpus_of.get(pid, ())

    def _recent(self, span_s: float) -> list[tuple[float, dict[str, tuple[float | None, float | None, float | None]]]]:
        """The readings of the `span_s` seconds up to the newest one."""
        with self._lock:
            now = self._readings[-1][0] if self._readings else 0.0
            return [(t, r) for t, r in self._readings if now - t <= span_s]

    def power(self, uuids: Sequence[str], span_s: float = ENERGY_SPAN_S) -> PowerSpan | None:
        """The power of the GPUs `uuids` over the `span_s` seconds up to the newest reading."""
        if not uuids:
            return None
        recent = self._recent(span_s)
        missing = (None, None, None)
        energy = [[(t, r.get(uuid, missing)[0]) for t, r in recent] for uuid in uuids]
        power = [[(t, r.get(uuid, missing)[1]) for t, r in recent] for uuid in uuids]
        return combined_power(energy) or mean_power(power)

    def utilization(self, uuids: Sequence[str], span_s: float) -> float | None:
        """GPU-Util (0-1) of the GPUs `uuids`, averaged over the `span_s` seconds up to the newest reading: the job
        pane's step model reads GPU busy from it, as diagnose and the exporter do. None where NVML gave none."""
        if not uuids:
            return None
        values = [
            util
            for _t, readings in self._recent(span_s)
            for uuid in uuids
            if (util := readings.get(uuid, (None, None, None))[2]) is not None
        ]
        return sum(values) / len(values) / 100.0 if values else None


def view_joules_per_sample(view: HookedView, power: PowerSpan | None) -> float | None:
    """Joules per sample over the power's span: its watts over the samples/s of the steps that ended in it."""
    if power is None or power.seconds <= 0:
        return None
    sums = window_sums(view.step_sums, power.start, power.end)
    if sums.steps <= 0 or sums.sampled_steps < sums.steps * 0.999:
        return None
    return joules_per_sample(power, sums.samples / power.seconds)
