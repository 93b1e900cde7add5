"""On a GPU machine: the Sampler's figures agree with nvidia-smi and raw pynvml read during one bf16 matmul load."""

from __future__ import annotations

import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import GpuSample, Snapshot

MIB = 1024 * 1024
READS = 5
LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


@dataclass
class Readings:
    """Everything read while the load ran: the sampler's snapshots and independent nvidia-smi / pynvml figures."""

    load_pid: int
    index: int
    uuid: str
    snapshots: list[Snapshot] = field(default_factory=list)
    smi: list[dict[str, float | None]] = field(default_factory=list)
    nvml_memory_used: list[int] = field(default_factory=list)
    nvml_utilization: list[float] = field(default_factory=list)
    nvml_process_sm: list[tuple[int, float | None]] = field(default_factory=list)
    """Per read: how many processes NVML lists on the GPU, and the load's newest per-process SM% sample."""
    gpm_supported: bool = False
    raw_gpm: list[dict[str, float]] = field(default_factory=list)

    def gpu(self, snapshot: Snapshot) -> GpuSample:
        return next(gpu for gpu in snapshot.gpus if gpu.uuid == self.uuid)


def nvidia_smi(uuid: str) -> dict[str, float | None]:
    """One row of nvidia-smi's own figures for this GPU; '[N/A]' becomes None."""
    fields = "utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw"
    output = subprocess.run(
        ["nvidia-smi", "-i", uuid, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    return dict(zip(fields.split(","), (_number(value) for value in output.split(",")), strict=True))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def raw_gpm(pynvml, handle, window: float = 0.5) -> dict[str, float]:
    """SM and tensor activity from two GPM samples taken here, independently of gpumon."""
    first, second = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(handle, first)
        time.sleep(window)
        pynvml.nvmlGpmSampleGet(handle, second)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1, request.sample2 = first, second
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        request.metrics[1].metricId = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        pynvml.nvmlGpmMetricsGet(request)
        assert request.metrics[0].nvmlReturn == pynvml.NVML_SUCCESS
        return {"sm_activity": request.metrics[0].value, "tensor_activity": request.metrics[1].value}
    finally:
        pynvml.nvmlGpmSampleFree(first)
        pynvml.nvmlGpmSampleFree(second)


def process_sm(pynvml, handle, pid: int) -> tuple[int, float | None]:
    """(processes NVML lists on the GPU, `pid`'s newest SM% sample from the last second), read independently."""
    count = len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) + len(
        pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle)
    )
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, time.time_ns() // 1000 - 1_000_000)
    except pynvml.NVMLError:
        return count, None
    mine = sorted((sample for sample in samples if sample.pid == pid), key=lambda sample: sample.timeStamp)
    return count, float(mine[-1].smUtil) if mine else None


def wait_for_line(process: subprocess.Popen, timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline().strip() if ready else ""


@pytest.fixture(scope="module")
def readings() -> Iterator[Readings]:
    import pynvml

    environment = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD, "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    pynvml.nvmlInit()
    sampler = Sampler()
    try:
        line = wait_for_line(load, timeout=300)
        if line != "ready":
            load.kill()
            _, stderr = load.communicate(timeout=30)
            pytest.fail(f"the matmul load did not start: {line!r} {stderr.strip()[-2000:]}")
        handle, index = find_load_gpu(pynvml, load.pid)
        result = Readings(load_pid=load.pid, index=index, uuid=pynvml.nvmlDeviceGetUUID(handle))
        result.gpm_supported = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        time.sleep(1.0)  # let the matmul loop reach a steady state
        for _ in range(READS):
            assert load.poll() is None, "the load ended before the reads were done"
            result.snapshots.append(sampler.sample_once(window=0.5))
            result.smi.append(nvidia_smi(result.uuid))
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            result.nvml_memory_used.append(memory.used)
            result.nvml_utilization.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            result.nvml_process_sm.append(process_sm(pynvml, handle, load.pid))
            if result.gpm_supported:
                result.raw_gpm.append(raw_gpm(pynvml, handle))
        yield result
    finally:
        sampler.stop()
        load.kill()
        load.wait(timeout=30)
        pynvml.nvmlShutdown()


def find_load_gpu(pynvml, pid: int) -> tuple[object, int]:
    """The NVML handle and index of the GPU the load's process runs on (waits up to 30 s for NVML to list it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            if any(process.pid == pid for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)):
                return handle, index
        time.sleep(0.2)
    pytest.fail(f"NVML never listed the load's pid {pid} on any GPU (a container with its own PID namespace?)")


def test_snapshots_are_complete(readings: Readings) -> None:
    for snapshot in readings.snapshots:
        assert snapshot.gpu_error is None
        assert snapshot.driver_version
        gpu = readings.gpu(snapshot)
        assert gpu.index == readings.index
        assert gpu.temperature is not None and gpu.power is not None and gpu.clock_sm is not None
        assert gpu.throttle_reasons is not None
        assert gpu.pcie_rx is not None and gpu.pcie_tx is not None


def test_memory_agrees_with_nvidia_smi_and_nvml(readings: Readings) -> None:
    for snapshot, smi, nvml_used in zip(readings.snapshots, readings.smi, readings.nvml_memory_used, strict=True):
        gpu = readings.gpu(snapshot)
        smi_used = smi["memory.used"] * MIB
        assert gpu.memory_used is not None and gpu.memory_total is not None
        assert abs(gpu.memory_used - smi_used) <= 0.02 * smi_used + 64 * MIB, (
            gpu.memory_used / MIB,
            smi["memory.used"],
        )
        assert abs(gpu.memory_used - nvml_used) <= 0.02 * nvml_used + 64 * MIB
        assert abs(gpu.memory_total - smi["memory.total"] * MIB) <= 0.02 * gpu.memory_total
        assert gpu.memory_used >= 2 * 8192 * 8192 * 2, "the load's two bf16 matrices are resident"


def test_utilization_agrees_with_nvidia_smi(readings: Readings) -> None:
    ours = statistics.mean(readings.gpu(snapshot).utilization_gpu for snapshot in readings.snapshots)
    smi = statistics.mean(row["utilization.gpu"] for row in readings.smi)
    nvml = statistics.mean(readings.nvml_utilization)
    assert abs(ours - smi) <= 15, (ours, smi)
    assert abs(ours - nvml) <= 15, (ours, nvml)
    assert ours > 50, f"a matmul loop should keep GPU-Util high, read {ours:.0f}%"


def test_temperature_and_power_agree_with_nvidia_smi(readings: Readings) -> None:
    temperature = statistics.mean(readings.gpu(snapshot).temperature for snapshot in readings.snapshots)
    power = statistics.mean(readings.gpu(snapshot).power for snapshot in readings.snapshots)
    assert abs(temperature - statistics.mean(row["temperature.gpu"] for row in readings.smi)) <= 5
    smi_powers = [row["power.draw"] for row in readings.smi if row["power.draw"] is not None]
    if smi_powers:  # some boards answer [N/A] for power.draw
        smi_power = statistics.mean(smi_powers)
        assert abs(power - smi_power) <= 0.3 * smi_power + 30, (power, smi_power)


def test_gpm_activity_under_matmul_load(readings: Readings) -> None:
    gpus = [readings.gpu(snapshot) for snapshot in readings.snapshots]
    if not readings.gpm_supported:
        assert all(gpu.sm_activity is None and gpu.tensor_activity is None for gpu in gpus), "GPM fields absent"
        pytest.skip("this GPU does not support NVML GPM (pre-Hopper): checked the GPM fields are absent")
    ours_sm = statistics.mean(gpu.sm_activity for gpu in gpus)
    ours_tensor = statistics.mean(gpu.tensor_activity for gpu in gpus)
    raw_sm = statistics.mean(row["sm_activity"] for row in readings.raw_gpm)
    raw_tensor = statistics.mean(row["tensor_activity"] for row in readings.raw_gpm)
    assert ours_sm > 50 and raw_sm > 50, (ours_sm, raw_sm)
    assert ours_tensor > 10 and raw_tensor > 10, (ours_tensor, raw_tensor)
    assert abs(ours_sm - raw_sm) <= 20, (ours_sm, raw_sm)
    assert all(gpu.sm_occupancy is not None and gpu.dram_bandwidth is not None for gpu in gpus)


def test_load_process_is_listed_with_gpu_memory(readings: Readings) -> None:
    for snapshot in readings.snapshots[1:]:
        by_pid = {process.pid: process for process in snapshot.processes}
        assert readings.load_pid in by_pid, [process.pid for process in snapshot.processes]
        load = by_pid[readings.load_pid]
        assert readings.index in load.gpu_indices
        assert load.gpu_memory is not None and load.gpu_memory > 0
        assert "torch" in load.command
        assert load.cpu_percent is not None and load.cpu_percent > 0


def test_the_sole_process_sm_share_agrees_with_nvmls_per_process_figure(readings: Readings) -> None:
    """gpumon gives a GPU's only process the GPU's utilization as its SM% instead of asking NVML per process."""
    compared = 0
    for snapshot, (count, nvml_sm) in zip(readings.snapshots[1:], readings.nvml_process_sm[1:], strict=True):
        if count != 1 or nvml_sm is None:
            continue
        load = next(process for process in snapshot.processes if process.pid == readings.load_pid)
        assert load.sm_percent is not None
        assert abs(load.sm_percent - nvml_sm) <= 15.0, (load.sm_percent, nvml_sm)
        compared += 1
    if not compared:
        pytest.skip("NVML listed other processes on the load's GPU, or gave no per-process samples")
