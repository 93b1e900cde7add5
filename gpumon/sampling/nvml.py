"""NVML collector: fast fields (utilization, memory, power, clocks, GPM), slow ones (temperature, PCIe, processes)."""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from gpumon.sampling.snapshot import GpuSample

log = logging.getLogger(__name__)

MIB = 1024 * 1024
GPM_MIN_WINDOW = 0.1
"""Seconds two GPM samples must lie apart to make one reading."""
RETRY_INTERVAL = 10.0
"""Seconds between attempts to bring NVML back after it failed."""

# Errors that mean "this field is not available here": the field is shown as absent.
_ABSENT_ERRORS = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_NO_DATA",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVML_ERROR_INSUFFICIENT_SIZE",
    "NVML_ERROR_NOT_READY",
    "NVML_ERROR_DEPRECATED",
    "NVML_ERROR_TIMEOUT",
)
# Errors that mean this one GPU is gone.
_DEVICE_LOST_ERRORS = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_GPU_NOT_FOUND")
# Errors that mean NVML as a whole stopped working (driver unloaded, library shut down...).
_LIBRARY_ERRORS = (
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_UNKNOWN",
)

CLOCK_EVENT_NAMES = {
    0x1: "idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}

# GpuSample field <- NVML GPM metric constant name, and the factor from NVML's unit to ours.
_GPM_METRICS = (
    ("sm_activity", "NVML_GPM_METRIC_SM_UTIL", 1.0),
    ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),
    ("tensor_activity", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),
    ("dram_bandwidth", "NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),
    ("pcie_rx", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", float(MIB)),
    ("pcie_tx", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", float(MIB)),
)


def decode_clock_events(mask: int) -> tuple[str, ...]:
    """Short names of the bits set in an NVML clock-event (throttle) reason mask."""
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCK_EVENT_NAMES.get(bit, f"0x{bit:x}"))
        bit <<= 1
    return tuple(names)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process NVML reports on one GPU."""

    pid: int
    gpu_index: int
    used_memory: int | None
    """Bytes; None where NVML hides it."""
    sm_percent: float | None = None


@dataclass(frozen=True, slots=True)
class SlowGpuReading:
    """The slow-tier NVML fields: per-GPU extras to merge into the fast GpuSamples, and GPU processes."""

    fields: dict[int, dict[str, Any]] = field(default_factory=dict)
    """GPU index -> GpuSample field name -> value (temperature, throttle_reasons, pcie_rx, pcie_tx)."""
    processes: tuple[GpuProcess, ...] = ()


class _Absent(Exception):
    """Internal: the field is not available (NotSupported and friends)."""


class _DeviceLost(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _LibraryFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class _Device:
    """One open GPU: its handle, static fields read once, and the GPM sample buffers."""

    index: int
    handle: Any
    uuid: str
    name: str
    memory_total: int | None
    power_limit: float | None
    memory_version: Any
    """Argument for nvmlDeviceGetMemoryInfo's version (v2 where it works, else None for v1)."""
    gpm: bool
    gpm_samples: list[Any] = field(default_factory=list)
    """Two preallocated nvmlGpmSample buffers; [0] holds the previous sample once gpm_previous_time is set."""
    gpm_previous_time: float | None = None
    gpm_request: Any = None
    gpm_values: dict[str, float | None] = field(default_factory=dict)
    utilization_gpu: float | None = None
    """The latest GPU utilization the fast tier read (None where NVML has none, as under MIG)."""
    gpm_pcie: bool = False
    """GPM gives PCIe rx/tx here, so the blocking nvmlDeviceGetPcieThroughput is skipped."""
    process_timestamp: int = 0
    """Last timestamp seen from nvmlDeviceGetProcessUtilization."""


class NvmlModule(Protocol):
    """The part of pynvml that GpuCollector calls directly (pynvml has no type hints); optional ones go via getattr.

    NVML handles, structs and GPM buffers are opaque ctypes objects, hence Any.
    """

    NVMLError: type[Exception]
    NVML_CLOCK_SM: int
    NVML_CLOCK_MEM: int
    NVML_TEMPERATURE_GPU: int
    NVML_GPM_METRICS_GET_VERSION: int
    c_nvmlGpmMetricsGet_t: Callable[[], Any]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any, /) -> str: ...
    def nvmlDeviceGetName(self, handle: Any, /) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = ..., /) -> Any: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetPowerManagementLimit(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any, /) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int, /) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, /) -> int: ...
    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int, /) -> int: ...
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleFree(self, sample: Any, /) -> None: ...
    def nvmlGpmSampleGet(self, handle: Any, sample: Any, /) -> Any: ...
    def nvmlGpmMetricsGet(self, request: Any, /) -> Any: ...


def _import_pynvml() -> NvmlModule:
    return cast(NvmlModule, importlib.import_module("pynvml"))


class GpuCollector:
    """Reads NVML. Never raises: a failing call leaves its field None, a failing NVML sets `error` and drops GPUs.

    `nvml` is the pynvml module (or a fake with the same functions); by default it is imported lazily.
    Safe to call collect_fast from one thread and collect_slow from another.
    """

    def __init__(
        self,
        nvml: NvmlModule | None = None,
        retry_interval: float = RETRY_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        self._retry_interval = retry_interval
        self._clock = clock
        self._lock = threading.RLock()
        self._devices: list[_Device] = []
        self._device_count = 0
        self._initialized = False
        self._attempted = False
        self._permanent_failure = False
        self._last_attempt = 0.0
        self._codes: dict[int, str] = {}
        self._unavailable: dict[int, str] = {}
        """GPU index -> why it is not read (lost mid-run, or could not be opened)."""
        self.error: str | None = None
        """Why GPU data is missing or partial, one line; None when every GPU reads fine."""
        self.driver_version: str | None = None

    # ---- public API -------------------------------------------------------------------------

    @property
    def _library(self) -> NvmlModule:
        """The NVML module; only read once _init has set it (every caller runs after a successful nvmlInit)."""
        assert self._nvml is not None, "NVML used before _init"
        return self._nvml

    @property
    def gpu_count(self) -> int:
        return len(self._devices)

    @property
    def gpm_supported(self) -> dict[int, bool]:
        """GPU index -> whether NVML GPM metrics are read on it."""
        return {device.index: device.gpm for device in self._devices}

    def collect_fast(self) -> tuple[GpuSample, ...]:
        """Utilization, memory, power, clocks and (where supported) GPM metrics of every working GPU."""
        with self._lock:
            self._ensure_initialized()
            samples = []
            for device in list(self._devices):
                try:
                    samples.append(self._fast_sample(device))
                except _DeviceLost as lost:
                    self._drop_device(device, lost.reason)
                except _LibraryFailed as failed:
                    self._fail_library(failed.reason)
                    return ()
            return tuple(samples)

    def collect_slow(self) -> SlowGpuReading:
        """Temperature, clock-event reasons, PCIe (where GPM lacks it) and the processes on each GPU."""
        with self._lock:
            self._ensure_initialized()
            fields: dict[int, dict[str, Any]] = {}
            processes: list[GpuProcess] = []
            pcie_devices: list[_Device] = []
            for device in list(self._devices):
                try:
                    fields[device.index] = self._slow_fields(device)
                    processes.extend(self._processes(device))
                except _DeviceLost as lost:
                    self._drop_device(device, lost.reason)
                    continue
                except _LibraryFailed as failed:
                    self._fail_library(failed.reason)
                    return SlowGpuReading()
                if not device.gpm_pcie:
                    pcie_devices.append(device)
        # nvmlDeviceGetPcieThroughput blocks ~20 ms per call: outside the lock so the fast tier keeps going.
        for device in pcie_devices:
            fields[device.index].update(self._pcie_throughput(device))
        return SlowGpuReading(fields=fields, processes=tuple(processes))

    def close(self) -> None:
        """Free GPM buffers and shut NVML down; safe to call twice."""
        with self._lock:
            for device in self._devices:
                self._free_gpm(device)
            self._devices = []
            if self._initialized:
                self._initialized = False
                try:
                    self._library.nvmlShutdown()
                except Exception:  # noqa: BLE001 - shutting down a broken NVML must not raise
                    pass

    # ---- init, failure and recovery -----------------------------------------------------------

    def _ensure_initialized(self) -> None:
        if not self._attempted:
            self._init()
        elif (
            self.error is not None
            and not self._permanent_failure
            and self._clock() - self._last_attempt >= self._retry_interval
        ):
            self._retry()

    def _init(self) -> None:
        self._attempted = True
        self._last_attempt = self._clock()
        if self._nvml is None:
            try:
                self._nvml = _import_pynvml()
            except ImportError:
                self._permanent_failure = True
                self.error = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                return
        nvml = self._nvml
        self._codes = {
            getattr(nvml, name): name
            for name in (*_ABSENT_ERRORS, *_DEVICE_LOST_ERRORS, *_LIBRARY_ERRORS)
            if hasattr(nvml, name)
        }
        try:
            nvml.nvmlInit()
        except Exception as error:  # noqa: BLE001 - any failure becomes the one-line error
            self.error = self._init_error(error)
            return
        self._initialized = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as error:  # noqa: BLE001 - counting failed: reported as the one-line error
            self.error = f"NVML: cannot count GPUs ({_describe(error)})"
            return
        self._device_count = count
        self.driver_version = self._optional(nvml.nvmlSystemGetDriverVersion)
        self._devices = []
        self._unavailable = {}
        for index in range(count):
            device, problem = self._open(index)
            if device is not None:
                self._devices.append(device)
            else:
                self._unavailable[index] = problem
        if count == 0:
            self.error = "no NVIDIA GPU found"
        else:
            self._set_error()

    def _init_error(self, error: Exception) -> str:
        name = self._code_name(error) or ""
        if name == "NVML_ERROR_LIBRARY_NOT_FOUND":
            return "NVIDIA driver not found (libnvidia-ml.so.1 missing)"
        if name == "NVML_ERROR_DRIVER_NOT_LOADED":
            return "NVIDIA driver not loaded"
        if name == "NVML_ERROR_NO_PERMISSION":
            return "NVML: insufficient permissions"
        if name == "NVML_ERROR_LIB_RM_VERSION_MISMATCH":
            return "NVML: driver/library version mismatch (reload the driver or reboot)"
        return f"NVML init failed: {_describe(error)}"

    def _open(self, index: int) -> tuple[_Device | None, str]:
        nvml = self._library
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = self._optional(nvml.nvmlDeviceGetUUID, handle) or f"GPU-{index}"
            name = self._optional(nvml.nvmlDeviceGetName, handle) or "NVIDIA GPU"
            memory_version = getattr(nvml, "nvmlMemory_v2", None)
            memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle, memory_version) if memory_version else None
            if memory is None:
                memory_version = None
                memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_limit = self._optional(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            if power_limit is None:
                power_limit = self._optional(nvml.nvmlDeviceGetPowerManagementLimit, handle)
            device = _Device(
                index=index,
                handle=handle,
                uuid=str(uuid),
                name=str(name),
                memory_total=int(memory.total) if memory is not None else None,
                power_limit=power_limit / 1000.0 if power_limit is not None else None,
                memory_version=memory_version,
                gpm=self._gpm_supported(handle),
            )
        except (_DeviceLost, _LibraryFailed) as error:
            return None, f"unavailable ({error})"
        except Exception as error:  # noqa: BLE001 - a GPU that cannot be opened is reported, not raised
            return None, f"unavailable ({_describe(error)})"
        if device.gpm:
            self._setup_gpm(device)
        return device, ""

    def _gpm_supported(self, handle: Any) -> bool:
        query = getattr(self._library, "nvmlGpmQueryDeviceSupport", None)
        if query is None:
            return False
        support = self._optional(query, handle)
        return bool(support is not None and getattr(support, "isSupportedDevice", 0))

    def _setup_gpm(self, device: _Device) -> None:
        nvml = self._library
        try:
            device.gpm_samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            wanted = [
                (name, getattr(nvml, constant), factor)
                for name, constant, factor in _GPM_METRICS
                if hasattr(nvml, constant)
            ]
            request.numMetrics = len(wanted)
            for slot, (_, metric_id, _) in enumerate(wanted):
                request.metrics[slot].metricId = metric_id
            device.gpm_request = (request, wanted)
        except Exception as error:  # noqa: BLE001 - GPM is optional: without it the fields stay absent
            log.debug("GPM setup failed on GPU %d: %s", device.index, error)
            self._free_gpm(device)
            device.gpm = False

    def _free_gpm(self, device: _Device) -> None:
        for sample in device.gpm_samples:
            try:
                self._library.nvmlGpmSampleFree(sample)
            except Exception:  # noqa: BLE001 - freeing a buffer of a broken NVML must not raise
                pass
        device.gpm_samples = []
        device.gpm_request = None
        device.gpm_previous_time = None

    def _drop_device(self, device: _Device, reason: str) -> None:
        log.warning("GPU %d dropped: %s", device.index, reason)
        self._free_gpm(device)
        self._devices = [other for other in self._devices if other is not device]
        self._unavailable[device.index] = f"lost ({reason})"
        self._set_error()
        self._last_attempt = self._clock()

    def _fail_library(self, reason: str) -> None:
        log.warning("NVML failed: %s", reason)
        for device in self._devices:
            self._free_gpm(device)
        self._devices = []
        self._unavailable = {}
        self.error = f"NVML failed ({reason}); retrying every {self._retry_interval:g} s"
        self._last_attempt = self._clock()

    def _set_error(self) -> None:
        if not self._unavailable:
            self.error = None
            return
        problems = "; ".join(f"GPU {index} {problem}" for index, problem in sorted(self._unavailable.items()))
        self.error = f"{problems}; retrying every {self._retry_interval:g} s"

    def _retry(self) -> None:
        """Reopen the GPUs that were lost, or re-initialize NVML from scratch when none is left."""
        if self._initialized and self._devices and self._unavailable:
            self._last_attempt = self._clock()
            for index in sorted(self._unavailable):
                device, problem = self._open(index)
                if device is not None:
                    del self._unavailable[index]
                    self._devices = sorted([*self._devices, device], key=lambda known: known.index)
                    log.info("GPU %d is back", index)
                else:
                    self._unavailable[index] = problem
            self._set_error()
            return
        if self._initialized:
            for device in self._devices:
                self._free_gpm(device)
            self._devices = []
            self._initialized = False
            try:
                self._library.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down a broken NVML must not raise
                pass
        self._init()

    # ---- one call, classified -----------------------------------------------------------------

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Call NVML: absent -> _Absent, lost GPU -> _DeviceLost, broken NVML -> _LibraryFailed."""
        try:
            return function(*args)
        except Exception as error:  # noqa: BLE001 - pynvml also raises non-NVMLError (version mismatch)
            code_name = self._code_name(error) if isinstance(error, self._library.NVMLError) else None
            if code_name in _DEVICE_LOST_ERRORS:
                raise _DeviceLost(_describe(error)) from None
            if code_name in _LIBRARY_ERRORS:
                raise _LibraryFailed(_describe(error)) from None
            raise _Absent(_describe(error)) from None

    def _code_name(self, error: Exception) -> str | None:
        """The NVML_ERROR_* name of an NVMLError's code, or None for another error."""
        code = getattr(error, "value", None)
        return self._codes.get(code) if isinstance(code, int) else None

    def _optional(self, function: Callable[..., Any], *args: Any) -> Any:
        """The value, or None where the field is not available here."""
        try:
            return self._call(function, *args)
        except _Absent:
            return None

    # ---- the tiers ---------------------------------------------------------------------------

    def _fast_sample(self, device: _Device) -> GpuSample:
        nvml, handle, optional = self._library, device.handle, self._optional
        utilization = optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        if device.memory_version is not None:
            memory = optional(nvml.nvmlDeviceGetMemoryInfo, handle, device.memory_version)
        else:
            memory = optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        power = optional(nvml.nvmlDeviceGetPowerUsage, handle)
        clock_sm = optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        clock_memory = optional(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
        gpm = self._gpm_reading(device) if device.gpm else {}
        device.utilization_gpu = float(utilization.gpu) if utilization is not None else None
        return GpuSample(
            index=device.index,
            uuid=device.uuid,
            name=device.name,
            utilization_gpu=float(utilization.gpu) if utilization is not None else None,
            utilization_memory=float(utilization.memory) if utilization is not None else None,
            memory_used=int(memory.used) if memory is not None else None,
            memory_total=(
                device.memory_total
                if device.memory_total is not None
                else (int(memory.total) if memory is not None else None)
            ),
            power=power / 1000.0 if power is not None else None,
            power_limit=device.power_limit,
            clock_sm=int(clock_sm) if clock_sm is not None else None,
            clock_memory=int(clock_memory) if clock_memory is not None else None,
            pcie_rx=gpm.get("pcie_rx"),
            pcie_tx=gpm.get("pcie_tx"),
            sm_activity=gpm.get("sm_activity"),
            sm_occupancy=gpm.get("sm_occupancy"),
            tensor_activity=gpm.get("tensor_activity"),
            dram_bandwidth=gpm.get("dram_bandwidth"),
        )

    def _gpm_reading(self, device: _Device) -> dict[str, float | None]:
        """Take a GPM sample; once >= 100 ms after the previous one, compute the metrics from the pair."""
        if not device.gpm_samples or device.gpm_request is None:
            return {}
        now = self._clock()
        if device.gpm_previous_time is not None and now - device.gpm_previous_time < GPM_MIN_WINDOW:
            return device.gpm_values
        previous, current = device.gpm_samples
        try:
            self._call(self._library.nvmlGpmSampleGet, device.handle, current)
        except _Absent:
            return device.gpm_values
        if device.gpm_previous_time is not None:
            device.gpm_values = self._gpm_metrics(device, previous, current)
        device.gpm_samples = [current, previous]
        device.gpm_previous_time = now
        return device.gpm_values

    def _gpm_metrics(self, device: _Device, first: Any, second: Any) -> dict[str, float | None]:
        request, wanted = device.gpm_request
        request.sample1 = first
        request.sample2 = second
        try:
            self._call(self._library.nvmlGpmMetricsGet, request)
        except _Absent:
            return {}
        success = getattr(self._library, "NVML_SUCCESS", 0)
        values: dict[str, float | None] = {}
        for slot, (name, _, factor) in enumerate(wanted):
            metric = request.metrics[slot]
            values[name] = float(metric.value) * factor if metric.nvmlReturn == success else None
        device.gpm_pcie = values.get("pcie_rx") is not None and values.get("pcie_tx") is not None
        return values

    def _slow_fields(self, device: _Device) -> dict[str, Any]:
        nvml, handle, optional = self._library, device.handle, self._optional
        temperature = optional(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        reasons_function = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = optional(reasons_function, handle) if reasons_function is not None else None
        if mask is None and hasattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"):
            mask = optional(nvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        return {
            "temperature": float(temperature) if temperature is not None else None,
            "throttle_reasons": decode_clock_events(int(mask)) if mask is not None else None,
        }

    def _pcie_throughput(self, device: _Device) -> dict[str, float | None]:
        """PCIe rx/tx in bytes/s from nvmlDeviceGetPcieThroughput (KB/s); any failure leaves them absent."""
        values: dict[str, float | None] = {}
        for name, counter in (("pcie_rx", "NVML_PCIE_UTIL_RX_BYTES"), ("pcie_tx", "NVML_PCIE_UTIL_TX_BYTES")):
            try:
                nvml = self._library
                kilobytes = self._call(nvml.nvmlDeviceGetPcieThroughput, device.handle, getattr(nvml, counter))
            except (_Absent, _DeviceLost, _LibraryFailed):
                kilobytes = None
            values[name] = kilobytes * 1024.0 if kilobytes is not None else None
        return values

    def _processes(self, device: _Device) -> list[GpuProcess]:
        memory_by_pid: dict[int, int | None] = {}
        for names in (
            ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2"),
        ):
            for info in self._first_available(names, device.handle) or ():
                used = getattr(info, "usedGpuMemory", None)
                known = memory_by_pid.get(info.pid)
                if used is not None and known is not None:
                    memory_by_pid[info.pid] = max(used, known)
                else:
                    memory_by_pid[info.pid] = used if used is not None else known
        if len(memory_by_pid) == 1 and device.utilization_gpu is not None:
            # A GPU running one process: its SM% is the GPU's utilization, the measure that
            # nvmlDeviceGetProcessUtilization gives per process, without that call's ~1.6 ms of CPU (H200).
            sm_by_pid = {next(iter(memory_by_pid)): device.utilization_gpu}
        else:
            sm_by_pid = self._process_utilization(device) if memory_by_pid else {}
        return [
            GpuProcess(pid=int(pid), gpu_index=device.index, used_memory=memory, sm_percent=sm_by_pid.get(pid))
            for pid, memory in memory_by_pid.items()
        ]

    def _first_available(self, names: tuple[str, ...], *args: Any) -> Any:
        for name in names:
            function = getattr(self._library, name, None)
            if function is not None:
                value = self._optional(function, *args)
                if value is not None:
                    return value
        return None

    def _process_utilization(self, device: _Device) -> dict[int, float]:
        function = getattr(self._library, "nvmlDeviceGetProcessUtilization", None)
        if function is None:
            return {}
        samples = self._optional(function, device.handle, device.process_timestamp)
        if not samples:
            return {}
        latest: dict[int, Any] = {}
        for sample in samples:
            seen = latest.get(sample.pid)
            if seen is None or sample.timeStamp >= seen.timeStamp:
                latest[sample.pid] = sample
            device.process_timestamp = max(device.process_timestamp, int(sample.timeStamp))
        return {pid: float(sample.smUtil) for pid, sample in latest.items()}


def _describe(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
