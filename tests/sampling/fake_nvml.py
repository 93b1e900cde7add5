"""A fake pynvml module: the functions GpuCollector calls, per-device configurable, raising real pynvml errors."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml as real

GIB = 1024**3


def nvml_error(code_name: str) -> real.NVMLError:
    return real.NVMLError(getattr(real, code_name))


@dataclass
class FakeDevice:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 80 * GIB
    memory_used: int = 10 * GIB
    memory_used_v1: int = 11 * GIB
    """What the v1 memory call reports (it counts reserved memory as used)."""
    utilization_gpu: int = 87
    utilization_memory: int = 42
    power_mw: int = 350_000
    power_limit_mw: int = 700_000
    clock_sm: int = 1980
    clock_memory: int = 2619
    temperature: int = 61
    clock_events: int = 0
    pcie_rx_kb: int = 2048
    pcie_tx_kb: int = 1024
    gpm: bool = True
    gpm_values: dict[int, float] = field(
        default_factory=lambda: {
            real.NVML_GPM_METRIC_SM_UTIL: 71.5,
            real.NVML_GPM_METRIC_SM_OCCUPANCY: 33.0,
            real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 55.25,
            real.NVML_GPM_METRIC_DRAM_BW_UTIL: 12.0,
            real.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 100.0,
            real.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 50.0,
        }
    )
    compute_processes: list[tuple[int, int | None]] = field(default_factory=list)
    """(pid, used bytes or None)."""
    graphics_processes: list[tuple[int, int | None]] = field(default_factory=list)
    process_utilization: list[tuple[int, int, int]] = field(default_factory=list)
    """(pid, timestamp us, SM%)."""
    unsupported: set[str] = field(default_factory=set)
    """Names of NVML functions that raise NotSupported on this device."""
    memory_v2: bool = True
    lost: bool = False


class FakeGpmSample:
    def __init__(self) -> None:
        self.device: FakeDevice | None = None
        self.sequence: int | None = None
        self.freed = False


class FakeMetricsGet:
    """Stands in for pynvml.c_nvmlGpmMetricsGet_t (same attribute names)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(32)]


class FakeNvml:
    """Module-like: attributes are NVML constants and functions. Flip `devices[i].lost`, `broken` mid-run."""

    NVMLError = real.NVMLError
    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    def __init__(self, devices: list[FakeDevice] | None = None, init_error: str | None = None) -> None:
        self.devices = devices if devices is not None else [FakeDevice()]
        self.init_error = init_error
        """An NVML_ERROR_* name that nvmlInit raises, e.g. 'NVML_ERROR_LIBRARY_NOT_FOUND'."""
        self.broken: str | None = None
        """An NVML_ERROR_* name that every call raises (driver unloaded mid-run)."""
        self.initialized = 0
        self.calls: Counter[str] = Counter()
        self.allocated: list[FakeGpmSample] = []
        self._sequence = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "nvmlMemory_v")):
            return getattr(real, name)
        raise AttributeError(name)

    # ---- plumbing ------------------------------------------------------------------------------

    def _enter(self, function: str, handle: FakeDevice | None = None) -> None:
        self.calls[function] += 1
        if self.broken is not None:
            raise nvml_error(self.broken)
        if not self.initialized:
            raise nvml_error("NVML_ERROR_UNINITIALIZED")
        if handle is not None:
            if handle.lost:
                raise nvml_error("NVML_ERROR_GPU_IS_LOST")
            if function in handle.unsupported:
                raise nvml_error("NVML_ERROR_NOT_SUPPORTED")

    # ---- library -------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.broken = None
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1
        if not self.initialized:
            raise nvml_error("NVML_ERROR_UNINITIALIZED")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        device = self.devices[index]
        self._enter("nvmlDeviceGetHandleByIndex", device)
        return device

    # ---- static --------------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle: FakeDevice) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeDevice) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        return handle.uuid

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        return handle.power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetPowerManagementLimit", handle)
        return handle.power_limit_mw

    # ---- fast ----------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=handle.utilization_gpu, memory=handle.utilization_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice, version: Any = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        if version:
            if not handle.memory_v2:
                raise nvml_error("NVML_ERROR_FUNCTION_NOT_FOUND")
            used = handle.memory_used
        else:
            used = handle.memory_used_v1
        return SimpleNamespace(total=handle.memory_total, used=used, free=handle.memory_total - used)

    def nvmlDeviceGetPowerUsage(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        return handle.power_mw

    def nvmlDeviceGetClockInfo(self, handle: FakeDevice, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle)
        return handle.clock_sm if clock_type == real.NVML_CLOCK_SM else handle.clock_memory

    # ---- GPM -----------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: FakeDevice) -> Any:
        self._enter("nvmlGpmQueryDeviceSupport", handle)
        return SimpleNamespace(version=1, isSupportedDevice=int(handle.gpm))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self._enter("nvmlGpmSampleAlloc")
        sample = FakeGpmSample()
        self.allocated.append(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        self.calls["nvmlGpmSampleFree"] += 1
        sample.freed = True

    def nvmlGpmSampleGet(self, handle: FakeDevice, sample: FakeGpmSample) -> FakeGpmSample:
        self._enter("nvmlGpmSampleGet", handle)
        if not handle.gpm:
            raise nvml_error("NVML_ERROR_NOT_SUPPORTED")
        assert not sample.freed, "GPM sample used after nvmlGpmSampleFree"
        self._sequence += 1
        sample.device, sample.sequence = handle, self._sequence
        return sample

    def nvmlGpmMetricsGet(self, request: FakeMetricsGet) -> FakeMetricsGet:
        self._enter("nvmlGpmMetricsGet")
        first, second = request.sample1, request.sample2
        # Like NVML: two filled samples of one device, taken in order, make one reading.
        if first is None or second is None or first.sequence is None or second.sequence is None:
            raise nvml_error("NVML_ERROR_INVALID_ARGUMENT")
        if first.device is not second.device or first.sequence >= second.sequence or first.freed or second.freed:
            raise nvml_error("NVML_ERROR_INVALID_ARGUMENT")
        assert request.version == real.NVML_GPM_METRICS_GET_VERSION
        for metric in request.metrics[: request.numMetrics]:
            value = first.device.gpm_values.get(metric.metricId)
            metric.nvmlReturn = real.NVML_SUCCESS if value is not None else real.NVML_ERROR_NOT_SUPPORTED
            metric.value = value if value is not None else 0.0
        return request

    # ---- slow ----------------------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: FakeDevice, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", handle)
        return handle.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return handle.clock_events

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return handle.clock_events

    def nvmlDeviceGetPcieThroughput(self, handle: FakeDevice, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput", handle)
        return handle.pcie_rx_kb if counter == real.NVML_PCIE_UTIL_RX_BYTES else handle.pcie_tx_kb

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeDevice) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.compute_processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeDevice) -> list[Any]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle.graphics_processes]

    def nvmlDeviceGetProcessUtilization(self, handle: FakeDevice, last_seen: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessUtilization", handle)
        samples = [
            SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, stamp, sm in handle.process_utilization
            if stamp > last_seen
        ]
        if not samples:
            raise nvml_error("NVML_ERROR_NOT_FOUND")
        return samples


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
