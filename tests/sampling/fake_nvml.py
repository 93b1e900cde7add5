"""A fake pynvml module: the functions GpuCollector calls, per-device configurable, raising real pynvml errors."""

from __future__ import annotations

import threading
from collections import Counter, deque
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
    power_limit_default_mw: int = 700_000
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
            real.NVML_GPM_METRIC_GRAPHICS_UTIL: 80.5,
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
    not_ready: set[str] = field(default_factory=set)
    """Names of NVML functions that raise NotReady (a passing failure) on this device."""
    memory_v2: bool = True
    lost: bool = False
    # ---- health
    clock_sm_max: int = 1980
    fan_percent: int = 45
    pcie_link: tuple[int, int, int, int] = (5, 16, 5, 16)
    """Generation and lanes now, generation and lanes at most."""
    energy_mj: int = 123_456_789
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    """(NVML_MEMORY_ERROR_TYPE_*, NVML_*_ECC) -> count; missing ones are 0."""
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    """(correctable, uncorrectable, pending, failure) as nvmlDeviceGetRemappedRows returns them."""
    retired_pages: dict[int, list[int]] = field(default_factory=dict)
    """NVML_PAGE_RETIREMENT_CAUSE_* -> page addresses (asked only where remapped rows are unsupported)."""
    retired_pages_pending: int = 0
    nvlink_kib: dict[tuple[int, int], float] = field(default_factory=dict)
    """(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX/TX, link) -> KiB so far; absent links are not supported."""
    nvlink_all_links: bool = True
    """The all-links scope (0xFFFFFFFF) is supported (else only one link at a time)."""
    mig_mode: int = 0
    mig_devices: list[FakeMigDevice | None] = field(default_factory=list)
    """MIG device slots (None: an empty slot); nvmlDeviceGetMaxMigDeviceCount is their number."""
    xid_events: bool = True
    """The GPU supports XID event registration."""


@dataclass
class FakeMigDevice:
    name: str = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    uuid: str = "MIG-00000000-0000-0000-0000-000000000000"
    memory_total: int = 10 * GIB
    memory_used: int = 2 * GIB
    memory_used_v1: int = 2 * GIB + 64 * 1024**2
    memory_v2: bool = True
    gpu_instance_id: int = 7
    compute_instance_id: int = 0
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)


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
        self.event_sets: list[FakeEventSet] = []

    def post_xid(self, index: int, xid: int) -> None:
        """An XID error on GPU `index`: every event set it is registered on receives it."""
        device = self.devices[index]
        for event_set in self.event_sets:
            event_set.post(device, xid)

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "nvmlMemory_v")):
            return getattr(real, name)
        raise AttributeError(name)

    # ---- plumbing ------------------------------------------------------------------------------

    def _enter(self, function: str, handle: FakeDevice | FakeMigDevice | None = None) -> None:
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
            if function in getattr(handle, "not_ready", ()):
                raise nvml_error("NVML_ERROR_NOT_READY")

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

    def nvmlDeviceGetName(self, handle: FakeDevice | FakeMigDevice) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeDevice | FakeMigDevice) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        return handle.uuid

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", handle)
        return handle.power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetPowerManagementLimit", handle)
        return handle.power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        return handle.power_limit_default_mw

    # ---- fast ----------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: FakeDevice) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=handle.utilization_gpu, memory=handle.utilization_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeDevice | FakeMigDevice, version: Any = None) -> Any:
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

    # ---- health --------------------------------------------------------------------------------

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeDevice, clock_type: int) -> int:
        self._enter("nvmlDeviceGetMaxClockInfo", handle)
        return handle.clock_sm_max

    def nvmlDeviceGetFanSpeed(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetFanSpeed", handle)
        return handle.fan_percent

    def _pcie_link(self, name: str, handle: FakeDevice, position: int) -> int:
        self._enter(name, handle)
        return handle.pcie_link[position]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeDevice) -> int:
        return self._pcie_link("nvmlDeviceGetCurrPcieLinkGeneration", handle, 0)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeDevice) -> int:
        return self._pcie_link("nvmlDeviceGetCurrPcieLinkWidth", handle, 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeDevice) -> int:
        return self._pcie_link("nvmlDeviceGetMaxPcieLinkGeneration", handle, 2)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeDevice) -> int:
        return self._pcie_link("nvmlDeviceGetMaxPcieLinkWidth", handle, 3)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", handle)
        return handle.energy_mj

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeDevice, error_type: int, counter_type: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", handle)
        return handle.ecc.get((error_type, counter_type), 0)

    def nvmlDeviceGetRemappedRows(self, handle: FakeDevice) -> tuple[int, int, int, int]:
        self._enter("nvmlDeviceGetRemappedRows", handle)
        return handle.remapped_rows

    def nvmlDeviceGetRetiredPages(self, handle: FakeDevice, cause: int) -> list[int]:
        self._enter("nvmlDeviceGetRetiredPages", handle)
        return list(handle.retired_pages.get(cause, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return handle.retired_pages_pending

    def nvmlDeviceGetFieldValues(self, handle: FakeDevice, field_ids: list[tuple[int, int]]) -> list[Any]:
        """Like NVML: the call succeeds, each field says by its own nvmlReturn whether it worked."""
        self._enter("nvmlDeviceGetFieldValues", handle)
        values = []
        for field_id, scope in field_ids:
            if scope == 0xFFFFFFFF and handle.nvlink_all_links:
                known = [kib for (fid, _), kib in handle.nvlink_kib.items() if fid == field_id]
                kib: float | None = sum(known) if known else None
            else:
                kib = handle.nvlink_kib.get((field_id, scope))
            values.append(
                SimpleNamespace(
                    fieldId=field_id,
                    scopeId=scope,
                    timestamp=0,
                    latencyUsec=0,
                    valueType=real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    nvmlReturn=real.NVML_SUCCESS if kib is not None else real.NVML_ERROR_NOT_SUPPORTED,
                    value=SimpleNamespace(ullVal=int(kib or 0)),
                )
            )
        return values

    # ---- MIG -----------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: FakeDevice) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        return [handle.mig_mode, handle.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return len(handle.mig_devices)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeDevice, index: int) -> FakeMigDevice:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not handle.mig_mode:
            raise nvml_error("NVML_ERROR_INVALID_ARGUMENT")
        mig = handle.mig_devices[index]
        if mig is None:
            raise nvml_error("NVML_ERROR_NOT_FOUND")
        return mig

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigDevice) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        return handle.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeMigDevice) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        return handle.compute_instance_id

    # ---- events --------------------------------------------------------------------------------

    def nvmlDeviceGetIndex(self, handle: FakeDevice) -> int:
        self._enter("nvmlDeviceGetIndex", handle)
        return next(index for index, device in enumerate(self.devices) if device is handle)

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("nvmlEventSetCreate")
        event_set = FakeEventSet()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: FakeDevice, event_types: int, event_set: FakeEventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        if not handle.xid_events or event_types & ~real.nvmlEventTypeXidCriticalError:
            raise nvml_error("NVML_ERROR_NOT_SUPPORTED")
        event_set.devices.append(handle)

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        assert not event_set.freed, "event set used after nvmlEventSetFree"
        return event_set.wait(timeout_ms)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self.calls["nvmlEventSetFree"] += 1
        event_set.freed = True


class FakeEventSet:
    """An NVML event set: registered devices and a queue of events that wait() hands out."""

    def __init__(self) -> None:
        self.devices: list[FakeDevice] = []
        self.freed = False
        self.waits = 0
        self._queue: deque[Any] = deque()
        self._ready = threading.Condition()

    def post(self, device: FakeDevice, xid: int) -> None:
        if any(device is registered for registered in self.devices):
            with self._ready:
                self._queue.append(
                    SimpleNamespace(
                        device=device,
                        eventType=real.nvmlEventTypeXidCriticalError,
                        eventData=xid,
                        gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF,
                    )
                )
                self._ready.notify_all()

    def wait(self, timeout_ms: int) -> Any:
        self.waits += 1
        with self._ready:
            if not self._queue:
                self._ready.wait(timeout_ms / 1000.0)
            if not self._queue:
                raise nvml_error("NVML_ERROR_TIMEOUT")
            return self._queue.popleft()


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
