"""NVLink rates current to the sampling interval (issue 38 item 6), against a fake pynvml: what a snapshot shows is the
traffic of its own tick, from GPM where it gives NVLink and from the NVLink counters where it does not, never a
reading repeated from an earlier tick (the health read, every 10 s, once gave the counters' rate and it stood for
10-14 s)."""

from __future__ import annotations

import pynvml as real
import pytest
from fake_nvml import FakeClock, FakeDevice, FakeNvml

from gpumon.sampling.nvml import GPM_NVLINK_UNIT, HEALTH_INTERVAL, NVLINK_MIN_WINDOW, GpuCollector
from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import CpuSample, DiskSample, GpuSample, ProcessSample

RX, TX = real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
GPM_RX, GPM_TX = real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
TRAFFIC_GB_S = (131.0, 37.5, 37.5, 90.0, 0.0, 0.0, 12.0, 0.0)
"""A tick's rate each way, GB/s: an all-reduce, a slower phase, idle, a short burst, idle again."""


class FakeHost:
    def collect(self) -> tuple[CpuSample, tuple[DiskSample, ...]]:
        return CpuSample(per_core=(10.0,), total=10.0), ()


class FakeProcesses:
    def collect(self, gpu_processes: object, extra_pids: object = ()) -> tuple[ProcessSample, ...]:
        return ()


def counter_device() -> FakeDevice:
    """A GPU with NVLink and no GPM (an A100): its rates come from the NVLink counters."""
    return FakeDevice(gpm=False, nvlink_kib={(RX, 0): 0.0, (TX, 0): 0.0})


def gpm_device() -> FakeDevice:
    """A GPU whose GPM gives NVLink rates (an H100 or H200), with NVLink counters too."""
    device = FakeDevice(nvlink_kib={(RX, 0): 0.0, (TX, 0): 0.0})
    device.gpm_values[GPM_RX] = device.gpm_values[GPM_TX] = 0.0
    return device


def dashboard(device: FakeDevice, clock: FakeClock) -> tuple[FakeNvml, Sampler]:
    """The live sampler over the device, health read every HEALTH_INTERVAL as on the dashboard."""
    nvml = FakeNvml([device])
    collector = GpuCollector(nvml=nvml, clock=clock)
    assert collector.health_interval == HEALTH_INTERVAL
    return nvml, Sampler(gpu=collector, host=FakeHost(), processes=FakeProcesses())


def shown(sampler: Sampler) -> GpuSample:
    """One tick as the dashboard gets it: the fast sample merged with the slow tier's latest fields."""
    (gpu,) = sampler.sample_once(window=0.0).gpus
    return gpu


def move_counters(device: FakeDevice, gb_s: float, seconds: float) -> None:
    kib = gb_s * 1e9 * seconds / 1024.0
    device.nvlink_kib[(RX, 0)] += kib
    device.nvlink_kib[(TX, 0)] += kib / 2


def stale_repeats(readings: list[float | None], truth: list[float]) -> int:
    """Ticks whose reading equals the tick before's while the traffic changed: a reading repeated, not measured."""
    return sum(
        1
        for index in range(1, len(readings))
        if readings[index] is not None and readings[index] == readings[index - 1] and truth[index] != truth[index - 1]
    )


def traffic(interval: float) -> list[float]:
    """TRAFFIC_GB_S over and over, for two health intervals of ticks."""
    return [TRAFFIC_GB_S[tick % len(TRAFFIC_GB_S)] for tick in range(round(2 * HEALTH_INTERVAL / interval))]


@pytest.mark.parametrize("interval", [0.25, 1.0])
def test_counter_rates_are_each_ticks_own_not_the_health_reads(interval: float) -> None:
    device, clock = counter_device(), FakeClock()
    nvml, sampler = dashboard(device, clock)
    truth = [gb_s * 1e9 for gb_s in traffic(interval)]
    try:
        assert shown(sampler).nvlink_rx is None, "the first health read finds NVLink: no rate yet"
        reads = nvml.calls["nvmlDeviceGetFieldValues"]
        shows: list[GpuSample] = []
        for rate in truth:
            move_counters(device, rate / 1e9, interval)
            clock.advance(interval)
            shows.append(shown(sampler))
    finally:
        sampler.stop()
    readings = [gpu.nvlink_rx for gpu in shows]
    assert stale_repeats(readings, truth) == 0, readings
    assert readings == [pytest.approx(rate, rel=1e-6) for rate in truth]
    assert [gpu.nvlink_tx for gpu in shows] == [pytest.approx(rate / 2, rel=1e-6) for rate in truth]
    assert readings[TRAFFIC_GB_S.index(0.0)] == 0.0, "idle reads 0 within one interval"
    # one counter read a tick (the second fast read of a tick, at the same instant, repeats it), plus the device
    # fields' health call at each health read
    health_reads = round(len(truth) * interval / HEALTH_INTERVAL) + 1
    assert nvml.calls["nvmlDeviceGetFieldValues"] - reads <= len(truth) + health_reads


def test_counter_rates_are_over_the_time_actually_elapsed() -> None:
    device, clock = counter_device(), FakeClock()
    _, sampler = dashboard(device, clock)
    try:
        shown(sampler)
        for seconds, gb_s in ((0.3, 50.0), (1.7, 20.0), (0.25, 100.0), (3.0, 0.0)):
            move_counters(device, gb_s, seconds)
            clock.advance(seconds)
            assert shown(sampler).nvlink_rx == pytest.approx(gb_s * 1e9, rel=1e-6), seconds
    finally:
        sampler.stop()


def test_a_tick_sooner_than_the_minimum_window_repeats_the_rate_without_a_read() -> None:
    device, clock = counter_device(), FakeClock()
    nvml = FakeNvml([device])
    collector = GpuCollector(nvml=nvml, clock=clock)
    try:
        collector.collect_slow()
        move_counters(device, 10.0, 1.0)
        clock.advance(1.0)
        first = collector.collect_fast()[0].nvlink_rx
        reads = nvml.calls["nvmlDeviceGetFieldValues"]
        clock.advance(NVLINK_MIN_WINDOW / 2)
        again = collector.collect_fast()[0].nvlink_rx
    finally:
        collector.close()
    assert first == again == pytest.approx(10e9, rel=1e-6)
    assert nvml.calls["nvmlDeviceGetFieldValues"] == reads


def test_counters_that_went_back_give_no_rate_then_rates_again() -> None:
    device, clock = counter_device(), FakeClock()
    _, sampler = dashboard(device, clock)
    try:
        shown(sampler)
        move_counters(device, 10.0, 1.0)
        clock.advance(1.0)
        assert shown(sampler).nvlink_rx == pytest.approx(10e9, rel=1e-6)
        device.nvlink_kib[(RX, 0)] = device.nvlink_kib[(TX, 0)] = 0.0  # a driver reload resets them
        clock.advance(1.0)
        assert shown(sampler).nvlink_rx is None, "no negative rate, no repeated one"
        move_counters(device, 5.0, 1.0)
        clock.advance(1.0)
        assert shown(sampler).nvlink_rx == pytest.approx(5e9, rel=1e-6)
    finally:
        sampler.stop()


@pytest.mark.parametrize("interval", [0.25, 1.0])
def test_gpm_rates_are_each_ticks_own_and_the_counters_are_not_read(interval: float) -> None:
    device, clock = gpm_device(), FakeClock()
    nvml, sampler = dashboard(device, clock)
    try:
        shown(sampler)
        clock.advance(interval)
        shown(sampler)  # GPM's first pair: its NVLink is trusted, the health read having found NVLink's counters
        reads = nvml.calls["nvmlDeviceGetFieldValues"]
        readings: list[float | None] = []
        for gb_s in TRAFFIC_GB_S:
            device.gpm_values[GPM_RX] = gb_s * 1e9 / GPM_NVLINK_UNIT
            device.gpm_values[GPM_TX] = gb_s * 1e9 / GPM_NVLINK_UNIT / 2
            clock.advance(interval)
            gpu = shown(sampler)
            assert gpu.nvlink_rx == pytest.approx(gb_s * 1e9)
            assert gpu.nvlink_tx == pytest.approx(gb_s * 1e9 / 2)
            readings.append(gpu.nvlink_rx)
    finally:
        sampler.stop()
    assert stale_repeats(readings, [gb_s * 1e9 for gb_s in TRAFFIC_GB_S]) == 0
    assert nvml.calls["nvmlDeviceGetFieldValues"] - reads <= 1, "GPM's rates need no counter read (one health read)"


def test_a_gpm_sample_that_fails_shows_no_figure_rather_than_the_last_and_the_counters_take_over() -> None:
    device, clock = gpm_device(), FakeClock()
    _, sampler = dashboard(device, clock)
    try:
        shown(sampler)
        device.gpm_values[GPM_RX] = device.gpm_values[GPM_TX] = 100.0
        clock.advance(1.0)
        assert shown(sampler).nvlink_rx == pytest.approx(100.0 * GPM_NVLINK_UNIT)

        device.unsupported.add("nvmlGpmSampleGet")  # GPM stops (MIG mode turned on, say)
        clock.advance(1.0)
        failed = shown(sampler)
        move_counters(device, 20.0, 1.0)
        clock.advance(1.0)
        counted = shown(sampler)

        device.unsupported.discard("nvmlGpmSampleGet")
        device.gpm_values[GPM_RX] = device.gpm_values[GPM_TX] = 7.0
        clock.advance(1.0)
        back = shown(sampler)
    finally:
        sampler.stop()
    assert failed.nvlink_rx is None and failed.sm_activity is None, "nothing repeated from the last GPM reading"
    assert counted.nvlink_rx == pytest.approx(20e9, rel=1e-6) and counted.sm_activity is None
    assert back.nvlink_rx == pytest.approx(7.0 * GPM_NVLINK_UNIT), "GPM again, over the time since its last sample"
    assert back.sm_activity is not None


def test_a_collector_told_not_to_take_nvlink_from_gpm_reads_the_counters_on_a_gpm_gpu() -> None:
    device, clock = gpm_device(), FakeClock()
    device.gpm_values[GPM_RX] = device.gpm_values[GPM_TX] = 999.0
    collector = GpuCollector(nvml=FakeNvml([device]), clock=clock, nvlink_from_gpm=False)
    try:
        collector.collect_fast()
        collector.collect_slow()
        move_counters(device, 30.0, 1.0)
        clock.advance(1.0)
        gpu = collector.collect_fast()[0]
    finally:
        collector.close()
    assert gpu.nvlink_rx == pytest.approx(30e9, rel=1e-6) and gpu.sm_activity is not None
