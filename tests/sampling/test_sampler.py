"""Sampler with a fake NVML and fake host/process collectors: delivery, history, pause, intervals, failures, stop."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from itertools import pairwise

import pytest
from fake_nvml import FakeDevice, FakeNvml

from gpumon.sampling.interval import MAX_INTERVAL_S, MAX_RECORD_INTERVAL_S, MIN_INTERVAL_S
from gpumon.sampling.nvml import GpuCollector, GpuProcess
from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import CpuSample, DiskSample, ProcessSample, Snapshot
from gpumon.sampling.source import INTERVAL_STEPS

WAIT = 5.0
"""Upper bound on waiting for a condition; tests never assert on timing."""


class FakeHost:
    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> tuple[CpuSample, tuple[DiskSample, ...]]:
        self.calls += 1
        cpu = CpuSample(per_core=(10.0, 30.0), total=20.0, memory_used=self.calls, memory_total=100)
        return cpu, (DiskSample("sda"),)


class FakeProcesses:
    def __init__(self) -> None:
        self.seen: list[tuple[tuple[GpuProcess, ...], tuple[int, ...]]] = []

    def collect(self, gpu_processes: Iterable[GpuProcess], extra_pids: Iterable[int] = ()) -> tuple[ProcessSample, ...]:
        gpu_processes, extra_pids = tuple(gpu_processes), tuple(extra_pids)
        self.seen.append((gpu_processes, extra_pids))
        return tuple(
            ProcessSample(pid=process.pid, gpu_indices=(process.gpu_index,), gpu_memory=process.used_memory)
            for process in gpu_processes
        )


class Collector:
    """Records delivered snapshots; `wait_for` blocks until a predicate over them holds."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []
        self._changed = threading.Condition()

    def __call__(self, snapshot: Snapshot) -> None:
        with self._changed:
            self.snapshots.append(snapshot)
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[list[Snapshot]], bool]) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.snapshots), timeout=WAIT)


def make_sampler(nvml: FakeNvml | None = None, interval: float = 0.1, retry_interval: float = 10.0) -> Sampler:
    device = FakeDevice(compute_processes=[(4242, 7 << 30)], clock_events=0x1)
    gpu = GpuCollector(nvml=nvml or FakeNvml([device]), retry_interval=retry_interval)
    return Sampler(interval=interval, slow_interval=0.2, gpu=gpu, host=FakeHost(), processes=FakeProcesses())


def test_start_delivers_snapshots_and_feeds_history() -> None:
    sampler = make_sampler()
    received = Collector()
    sampler.start(received)
    try:
        assert received.wait_for(lambda snaps: len(snaps) >= 4 and bool(snaps[-1].processes))
    finally:
        sampler.stop()
    assert len(sampler.history) >= 4
    assert sampler.history.last("cpu.total", 1) == [20.0]
    assert sampler.history.last("gpu0.utilization_gpu", 1) == [87.0]
    last = received.snapshots[-1]
    assert last.hostname and last.driver_version == "580.95.05" and last.gpu_error is None
    (gpu,) = last.gpus
    assert gpu.temperature == 61.0 and gpu.throttle_reasons == ("idle",), "slow-tier fields are merged in"
    assert gpu.sm_activity == 71.5, "GPM read on the fast tier"
    assert gpu.pcie_rx == 100.0 * 1024 * 1024, "GPM's PCIe figure wins over the slow tier's"
    assert [process.pid for process in last.processes] == [4242]
    assert all(later.timestamp >= earlier.timestamp for earlier, later in pairwise(received.snapshots))


def test_pause_stops_delivery_and_resume_restarts_it() -> None:
    sampler = make_sampler()
    received = Collector()
    sampler.start(received)
    try:
        assert received.wait_for(lambda snaps: len(snaps) >= 2)
        sampler.pause()
        assert sampler.paused
        time.sleep(0.25)  # lets a tick already under way finish
        count = len(received.snapshots)
        time.sleep(0.4)
        assert len(received.snapshots) == count
        sampler.resume()
        assert not sampler.paused
        assert received.wait_for(lambda snaps: len(snaps) >= count + 2)
    finally:
        sampler.stop()


def test_faster_and_slower_step_through_the_intervals() -> None:
    sampler = make_sampler(interval=1.0)
    assert sampler.description == "live", "the dashboard adds the interval itself"
    seen = []
    for _ in range(len(INTERVAL_STEPS)):
        sampler.faster()
        seen.append(sampler.interval)
    assert seen == [0.5, 0.25, 0.1, 0.1, 0.1, 0.1, 0.1]
    seen = []
    for _ in range(len(INTERVAL_STEPS)):
        sampler.slower()
        seen.append(sampler.interval)
    assert seen == [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 10.0]
    assert sampler.slow_interval == 10.0, "the slow tier never runs more often than the fast one"


def test_stop_leaves_no_thread_and_shuts_nvml_down() -> None:
    nvml = FakeNvml([FakeDevice()])
    sampler = make_sampler(nvml)
    received = Collector()
    sampler.start(received)
    assert received.wait_for(lambda snaps: len(snaps) >= 1)

    sampler.stop()
    sampler.stop()

    assert not [thread for thread in threading.enumerate() if thread.name.startswith("gpumon-sampler")]
    assert nvml.initialized == 0
    count = len(received.snapshots)
    time.sleep(0.2)
    assert len(received.snapshots) == count


def test_callback_errors_do_not_stop_sampling() -> None:
    sampler = make_sampler()
    received = Collector()

    def flaky(snapshot: Snapshot) -> None:
        received(snapshot)
        raise RuntimeError("a broken view")

    sampler.start(flaky)
    try:
        assert received.wait_for(lambda snaps: len(snaps) >= 3)
    finally:
        sampler.stop()


def test_gpu_lost_mid_run_keeps_cpu_data_flowing_and_recovers() -> None:
    nvml = FakeNvml([FakeDevice()])
    sampler = make_sampler(nvml, retry_interval=0.3)
    received = Collector()
    sampler.start(received)
    try:
        assert received.wait_for(lambda snaps: bool(snaps) and len(snaps[-1].gpus) == 1)
        nvml.devices[0].lost = True
        assert received.wait_for(lambda snaps: not snaps[-1].gpus and snaps[-1].gpu_error is not None)
        lost = received.snapshots[-1]
        assert lost.gpu_error.startswith("GPU 0 ") and "GPU is lost" in lost.gpu_error
        count = len(received.snapshots)
        assert received.wait_for(lambda snaps: len(snaps) >= count + 2), "CPU snapshots keep coming"
        assert received.snapshots[-1].cpu.total == 20.0

        nvml.devices[0].lost = False
        assert received.wait_for(lambda snaps: len(snaps[-1].gpus) == 1 and snaps[-1].gpu_error is None)
    finally:
        sampler.stop()


def test_no_nvml_at_all_still_samples_the_host() -> None:
    sampler = make_sampler(FakeNvml(init_error="NVML_ERROR_LIBRARY_NOT_FOUND"))
    received = Collector()
    sampler.start(received)
    try:
        assert received.wait_for(lambda snaps: len(snaps) >= 2)
    finally:
        sampler.stop()
    last = received.snapshots[-1]
    assert last.gpus == () and last.gpu_error == "NVIDIA driver not found (libnvidia-ml.so.1 missing)"
    assert last.cpu.per_core == (10.0, 30.0)


def test_sample_once_is_complete_and_json_round_trips() -> None:
    sampler = make_sampler()
    sampler.track_pids([77])
    try:
        snapshot = sampler.sample_once(window=0.15)
    finally:
        sampler.stop()

    (gpu,) = snapshot.gpus
    assert gpu.temperature == 61.0 and gpu.sm_activity == 71.5 and gpu.memory_used is not None
    assert [process.pid for process in snapshot.processes] == [4242]
    assert sampler.processes.seen[-1][1] == (77,), "tracked pids reach the process collector"
    assert len(sampler.history) == 1
    assert Snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))) == snapshot


@pytest.mark.parametrize(
    ("interval", "expected"), [(0.01, MIN_INTERVAL_S), (60.0, 60.0), (600.0, MAX_RECORD_INTERVAL_S)]
)
def test_interval_is_clamped(interval: float, expected: float) -> None:
    """The constructor takes `gpumon record`'s range (up to 60 s); the live keys step within the dashboard's."""
    sampler = make_sampler(interval=interval)
    assert sampler.interval == expected
    sampler.set_interval(interval)
    assert INTERVAL_STEPS[0] <= sampler.interval <= INTERVAL_STEPS[-1] == MAX_INTERVAL_S
