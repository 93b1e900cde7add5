"""NVML collector: fast fields (utilization, memory, power, clocks, GPM, NVLink rates), slow ones (temperature, PCIe,
health, MIG, processes); XID errors are watched by xid_watcher.XidWatcher, the NVML calls typed in nvml_api."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumon.sampling.nvml_api import (
    ABSENT_ERRORS,
    DEVICE_LOST_ERRORS,
    LIBRARY_ERRORS,
    MIB,
    PERMANENT_ABSENT_ERRORS,
    NvmlModule,
    decode_clock_events,
    describe_error,
    import_pynvml,
)
from gpumon.sampling.snapshot import GpuSample, MigSample
from gpumon.sampling.xid_watcher import XidWatcher

log = logging.getLogger(__name__)

GPM_MIN_WINDOW = 0.1
"""Seconds two GPM samples must lie apart to make one reading."""
NVLINK_MIN_WINDOW = GPM_MIN_WINDOW
"""Seconds two NVLink counter readings must lie apart to make one rate (a fast tick sooner repeats the last)."""
RETRY_INTERVAL = 10.0
"""Seconds between attempts to bring NVML back after it failed."""

HEALTH_INTERVAL = 10.0
"""Seconds between health reads (ECC, energy, MIG...): slow-changing, and about 6 ms of CPU per H200."""
QUIET_ENERGY_INTERVAL = 60.0
"""Seconds between energy counter reads while nothing needs joules per sample: 4 of those 6 ms are the counter."""
ALL_LINKS = 0xFFFFFFFF
"""Field-value scope that sums an NVLink counter over every link."""
MIG_ENABLED = 1
"""NVML_DEVICE_MIG_ENABLE."""

GPM_NVLINK_UNIT = 1000.0 * 1024
"""Bytes per unit of GPM's NVLink rates. NVML documents MiB/s, but against the bytes a peer-copy load counted moving
over NVLink (2x H200, driver 580) they read 2.3% high as MiB (192.8 GB/s for 188.5 moved, which NVLink's KiB
counters give exactly) and right in units of 1,000 KiB: benchmarks/nvlink_gpm_check.py, benchmarks/README.md."""

# GpuSample field <- NVML GPM metric constant name, and the factor from NVML's unit to ours.
_GPM_METRICS = (
    ("sm_activity", "NVML_GPM_METRIC_SM_UTIL", 1.0),
    ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),
    ("tensor_activity", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),
    ("dram_bandwidth", "NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),
    ("graphics_activity", "NVML_GPM_METRIC_GRAPHICS_UTIL", 1.0),
    ("pcie_rx", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", float(MIB)),
    ("pcie_tx", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", float(MIB)),
    ("nvlink_rx", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", GPM_NVLINK_UNIT),
    ("nvlink_tx", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", GPM_NVLINK_UNIT),
)
_NVLINK = ("nvlink_rx", "nvlink_tx")
"""Not asked of GPM with GpuCollector(nvlink_from_gpm=False): the NVLink counters give the rates, as on a GPU without
GPM's NVLink metrics (benchmarks/nvlink_allreduce_check.py --counters checks that path on an H200)."""
GRAPHICS_ACTIVITY = "graphics_activity"
"""Read only where asked (dcgm-exporter's GR_ENGINE_ACTIVE): nothing on the dashboard shows it."""


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
    """Internal: the field is not available (NotSupported and friends); `permanent` when it will not come back."""

    def __init__(self, reason: str, permanent: bool) -> None:
        super().__init__(reason)
        self.permanent = permanent


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
    nvlink_present: bool = False
    """The NVLink counters answered once: the GPU has NVLink (GPM's NVLink metrics are trusted only then, and the
    fast tier reads the counters only then)."""
    gpm_nvlink: bool = False
    """GPM gives NVLink rx/tx here, each fast tick, so the fast tier skips the NVLink counters."""
    process_timestamp: int = 0
    """Last timestamp seen from nvmlDeviceGetProcessUtilization."""
    clock_sm_max: int | None = None
    power_limit_default: float | None = None
    """Watts: the card's default power limit, once NVML gave it."""
    unsupported: set[str] = field(default_factory=set)
    """Health calls this GPU does not support: not tried again."""
    nvlink_previous: tuple[float, float, float] | None = None
    """(seconds, KiB received, KiB sent): the last NVLink counter reading, for the rates."""
    nvlink_rates: tuple[float | None, float | None] = (None, None)
    """Bytes/s received and sent between the last two counter readings."""
    health: dict[str, Any] = field(default_factory=dict)
    """The latest health fields, repeated on the slow ticks between two health reads."""
    health_read_at: float | None = None
    energy: float | None = None
    """The latest energy counter reading, in mJ, repeated between two reads."""
    energy_read_at: float | None = None
    pci_bus_id: str | None = None
    """NVML's PCI bus id, e.g. "00000000:19:00.0" (read once: it never changes)."""
    memory_reserved: int | None = None
    """Bytes the driver reserves (the v2 memory call's `reserved`, read once)."""


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
        health_interval: float = HEALTH_INTERVAL,
        graphics_activity: bool = False,
        nvlink_from_gpm: bool = True,
    ) -> None:
        self._nvml = nvml
        self._gpm_wanted = tuple(
            metric
            for metric in _GPM_METRICS
            if (graphics_activity or metric[0] != GRAPHICS_ACTIVITY) and (nvlink_from_gpm or metric[0] not in _NVLINK)
        )
        self._retry_interval = retry_interval
        self._health_interval = health_interval
        self.energy_interval = health_interval
        """Seconds between energy counter reads (at health reads, so never more often than those)."""
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
        self._xid_wanted = False
        self._xid: XidWatcher | None = None

    # ---- public API -------------------------------------------------------------------------

    @property
    def health_interval(self) -> float:
        """Seconds between health reads."""
        return self._health_interval

    @property
    def _library(self) -> NvmlModule:
        """The NVML module; only read once _init has set it (every caller runs after a successful nvmlInit)."""
        assert self._nvml is not None, "NVML used before _init"
        return self._nvml

    @property
    def gpu_count(self) -> int:
        """How many GPUs NVML found."""
        return len(self._devices)

    @property
    def gpm_supported(self) -> dict[int, bool]:
        """GPU index -> whether NVML GPM metrics are read on it."""
        return {device.index: device.gpm for device in self._devices}

    def collect_fast(self) -> tuple[GpuSample, ...]:
        """Utilization, memory, power, clocks, (where supported) GPM metrics and NVLink rates of every working GPU."""
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
            watcher = self._xid
            for index in fields:
                fields[index]["xid_events"] = watcher.events(index) if watcher is not None else None
        # nvmlDeviceGetPcieThroughput blocks ~20 ms per call: outside the lock so the fast tier keeps going.
        for device in pcie_devices:
            fields[device.index].update(self._pcie_throughput(device))
        return SlowGpuReading(fields=fields, processes=tuple(processes))

    def watch_xid_events(self) -> None:
        """Watch XID errors on a thread of their own from now on (again after NVML recovers), until close()."""
        with self._lock:
            self._xid_wanted = True
            self._ensure_initialized()
            self._start_xid()

    def close(self) -> None:
        """Stop watching XID errors, free GPM buffers and shut NVML down; safe to call twice."""
        with self._lock:
            self._xid_wanted = False
            self._stop_xid(wait=True)
            for device in self._devices:
                self._free_gpm(device)
            self._devices = []
            if self._initialized:
                self._initialized = False
                try:
                    self._library.nvmlShutdown()
                except Exception:  # shutting down a broken NVML must not raise
                    log.debug("NVML: shutdown failed", exc_info=True)

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
                self._nvml = import_pynvml()
            except ImportError:
                self._permanent_failure = True
                self.error = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                return
        nvml = self._nvml
        self._codes = {
            getattr(nvml, name): name
            for name in (*ABSENT_ERRORS, *DEVICE_LOST_ERRORS, *LIBRARY_ERRORS)
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
            self.error = f"NVML: cannot count GPUs ({describe_error(error)})"
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
        self._start_xid()

    def _start_xid(self) -> None:
        if not self._xid_wanted or not self._initialized or not self._devices:
            return
        if self._xid is not None and self._xid.running:
            return
        self._xid = XidWatcher(self._library, [(device.index, device.handle) for device in self._devices])
        self._xid.start()

    def _stop_xid(self, wait: bool) -> None:
        if self._xid is not None:
            self._xid.stop(timeout=2.0 if wait else 0.0)
            self._xid = None

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
        return f"NVML init failed: {describe_error(error)}"

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
            reserved = getattr(memory, "reserved", None) if memory_version is not None else None
            max_clock = getattr(nvml, "nvmlDeviceGetMaxClockInfo", None)
            clock_sm_max = self._optional(max_clock, handle, nvml.NVML_CLOCK_SM) if max_clock is not None else None
            device = _Device(
                index=index,
                handle=handle,
                uuid=str(uuid),
                name=str(name),
                memory_total=int(memory.total) if memory is not None else None,
                power_limit=power_limit / 1000.0 if power_limit is not None else None,
                memory_version=memory_version,
                gpm=self._gpm_supported(handle),
                clock_sm_max=int(clock_sm_max) if clock_sm_max is not None else None,
                pci_bus_id=self._pci_bus_id(handle),
                memory_reserved=int(reserved) if reserved is not None else None,
            )
        except (_DeviceLost, _LibraryFailed) as error:
            return None, f"unavailable ({error})"
        except Exception as error:  # noqa: BLE001 - a GPU that cannot be opened is reported, not raised
            return None, f"unavailable ({describe_error(error)})"
        if device.gpm:
            self._setup_gpm(device)
        return device, ""

    def _pci_bus_id(self, handle: Any) -> str | None:
        """NVML's PCI bus id ("00000000:19:00.0"), or None where it cannot be read."""
        function = getattr(self._library, "nvmlDeviceGetPciInfo", None)
        info = self._optional(function, handle) if function is not None else None
        bus_id = getattr(info, "busId", None)
        if isinstance(bus_id, bytes):
            bus_id = bus_id.decode("ascii", "replace")
        return bus_id if isinstance(bus_id, str) and bus_id else None

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
                for name, constant, factor in self._gpm_wanted
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
            except Exception:  # freeing a buffer of a broken NVML must not raise
                log.debug("NVML: freeing a GPM sample failed", exc_info=True)
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
        self._stop_xid(wait=False)
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
            self._stop_xid(wait=True)
            for device in self._devices:
                self._free_gpm(device)
            self._devices = []
            self._initialized = False
            try:
                self._library.nvmlShutdown()
            except Exception:  # shutting down a broken NVML must not raise
                log.debug("NVML: shutdown failed", exc_info=True)
        self._init()

    # ---- one call, classified -----------------------------------------------------------------

    def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Call NVML: absent -> _Absent, lost GPU -> _DeviceLost, broken NVML -> _LibraryFailed."""
        try:
            return function(*args)
        except Exception as error:  # noqa: BLE001 - pynvml also raises non-NVMLError (version mismatch)
            is_nvml = isinstance(error, self._library.NVMLError)
            code_name = self._code_name(error) if is_nvml else None
            if code_name in DEVICE_LOST_ERRORS:
                raise _DeviceLost(describe_error(error)) from None
            if code_name in LIBRARY_ERRORS:
                raise _LibraryFailed(describe_error(error)) from None
            raise _Absent(
                describe_error(error), permanent=not is_nvml or code_name in PERMANENT_ABSENT_ERRORS
            ) from None

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
        nvlink_rx, nvlink_tx = self._fast_nvlink(device, gpm)
        device.utilization_gpu = float(utilization.gpu) if utilization is not None else None
        return GpuSample(
            index=device.index,
            uuid=device.uuid,
            name=device.name,
            utilization_gpu=float(utilization.gpu) if utilization is not None else None,
            utilization_memory=float(utilization.memory) if utilization is not None else None,
            memory_used=int(memory.used) if memory is not None else None,
            memory_free=int(memory.free) if memory is not None else None,
            memory_total=(
                device.memory_total
                if device.memory_total is not None
                else (int(memory.total) if memory is not None else None)
            ),
            power=power / 1000.0 if power is not None else None,
            power_limit=device.power_limit,
            clock_sm=int(clock_sm) if clock_sm is not None else None,
            clock_memory=int(clock_memory) if clock_memory is not None else None,
            clock_sm_max=device.clock_sm_max,
            pcie_rx=gpm.get("pcie_rx"),
            pcie_tx=gpm.get("pcie_tx"),
            sm_activity=gpm.get("sm_activity"),
            sm_occupancy=gpm.get("sm_occupancy"),
            tensor_activity=gpm.get("tensor_activity"),
            dram_bandwidth=gpm.get("dram_bandwidth"),
            graphics_activity=gpm.get("graphics_activity"),
            nvlink_rx=nvlink_rx,
            nvlink_tx=nvlink_tx,
        )

    def _fast_nvlink(self, device: _Device, gpm: dict[str, float | None]) -> tuple[float | None, float | None]:
        """NVLink rx/tx in bytes/s, current to this tick: GPM's where it gives them (no NVML call of their own), else
        from the NVLink counters on a GPU that has NVLink (one nvmlDeviceGetFieldValues call, about 1 ms of CPU on an
        H200), over the time since their last reading."""
        if device.gpm_nvlink:
            return gpm.get("nvlink_rx"), gpm.get("nvlink_tx")
        if not device.nvlink_present:
            return None, None
        return self._nvlink_rates(device)

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
            # No reading this tick, rather than the last one repeated (GPM can stop for good: MIG mode turned on).
            # The previous sample is kept: the next sample that works makes a reading over all the time since.
            values: dict[str, float | None] = {}
        else:
            values = self._gpm_metrics(device, previous, current) if device.gpm_previous_time is not None else {}
            device.gpm_samples = [current, previous]
            device.gpm_previous_time = now
        device.gpm_values = values
        self._note_gpm_links(device, values)
        return values

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
        return values

    def _note_gpm_links(self, device: _Device, values: dict[str, float | None]) -> None:
        """Whether this GPM reading gave PCIe and NVLink rates: where it did not, the slow tier reads PCIe throughput
        and the fast tier the NVLink counters."""
        device.gpm_pcie = values.get("pcie_rx") is not None and values.get("pcie_tx") is not None
        gpm_nvlink = device.nvlink_present and None not in (values.get("nvlink_rx"), values.get("nvlink_tx"))
        if gpm_nvlink != device.gpm_nvlink:
            device.gpm_nvlink = gpm_nvlink
            device.nvlink_previous = None  # the counters' next reading starts a new rate

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
            "pci_bus_id": device.pci_bus_id,
            "memory_reserved": device.memory_reserved,
            **self._health(device),
        }

    def _health(self, device: _Device) -> dict[str, Any]:
        """The health fields, read again once every health interval."""
        now = self._clock()
        if device.health_read_at is None or now - device.health_read_at >= self._health_interval:
            device.health = {**self._health_fields(device), **self._mig_fields(device)}
            device.health_read_at = now
        return device.health

    # ---- health (slow tier): each call tried until the GPU says it does not support it --------------

    def _health_call(self, device: _Device, key: str, function: Callable[..., Any] | None, *args: Any) -> Any:
        """The value of an optional health call, or None; a call the GPU does not support is not made again."""
        if key in device.unsupported:
            return None
        if function is None:
            device.unsupported.add(key)
            return None
        try:
            return self._call(function, device.handle, *args)
        except _Absent as absent:
            if absent.permanent:
                device.unsupported.add(key)
            return None

    def _health_fields(self, device: _Device) -> dict[str, Any]:
        nvml, call = self._library, self._health_call
        fan = call(device, "fan", getattr(nvml, "nvmlDeviceGetFanSpeed", None))
        now = self._clock()
        if device.energy_read_at is None or now - device.energy_read_at >= self.energy_interval:
            device.energy = call(device, "energy", getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None))
            device.energy_read_at = now
        energy = device.energy
        power_limit = call(device, "power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit)
        if power_limit is not None:
            device.power_limit = power_limit / 1000.0  # it can change while running (nvidia-smi -pl)
        if device.power_limit_default is None:  # fixed for the card: asked until it answers
            default = call(
                device, "power_limit_default", getattr(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", None)
            )
            device.power_limit_default = default / 1000.0 if default is not None else None
        if not device.nvlink_present:
            self._find_nvlink(device)
        fields: dict[str, Any] = {
            "power_limit_default": device.power_limit_default,
            "fan_speed": float(fan) if fan is not None else None,
            "energy_total": energy / 1000.0 if energy is not None else None,
            **self._pcie_link_fields(device),
            **self._ecc_fields(device),
            **self._remapped_fields(device),
            **self._device_field_values(device),
            **self._codec_fields(device),
        }
        return fields

    def _device_field_values(self, device: _Device) -> dict[str, Any]:
        """Memory temperature and PCIe replays, in one nvmlDeviceGetFieldValues call."""
        nvml = self._library
        ids = [getattr(nvml, name, None) for name in ("NVML_FI_DEV_MEMORY_TEMP", "NVML_FI_DEV_PCIE_REPLAY_COUNTER")]
        absent: dict[str, Any] = {"memory_temperature": None, "pcie_replays": None}
        if None in ids:
            return absent
        function = getattr(nvml, "nvmlDeviceGetFieldValues", None)
        values = self._health_call(device, "device_fields", function, [(field_id, 0) for field_id in ids])
        if values is None:
            return absent
        temperature, replays = _field_numbers(nvml, values)
        if temperature is None and replays is None:
            device.unsupported.add("device_fields")  # neither field exists on this GPU
        return {
            "memory_temperature": temperature if temperature is not None and temperature > 0 else None,
            "pcie_replays": int(replays) if replays is not None else None,
        }

    def _codec_fields(self, device: _Device) -> dict[str, float | None]:
        """Video encoder and decoder utilization (percent; NVML returns it with its sampling period)."""
        nvml = self._library
        fields: dict[str, float | None] = {}
        for name, function in (
            ("encoder_utilization", "nvmlDeviceGetEncoderUtilization"),
            ("decoder_utilization", "nvmlDeviceGetDecoderUtilization"),
        ):
            value = self._health_call(device, name, getattr(nvml, function, None))
            fields[name] = float(value[0]) if value is not None else None
        return fields

    def _pcie_link_fields(self, device: _Device) -> dict[str, int | None]:
        """The PCIe link's generation and lanes now and at most (the GPU and its slot together)."""
        nvml = self._library
        fields: dict[str, int | None] = {}
        for name, function in (
            ("pcie_link_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
            ("pcie_link_width", "nvmlDeviceGetCurrPcieLinkWidth"),
            ("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
            ("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
        ):
            value = self._health_call(device, name, getattr(nvml, function, None))
            fields[name] = int(value) if value is not None and int(value) > 0 else None
        return fields

    def _ecc_fields(self, device: _Device) -> dict[str, int | None]:
        nvml = self._library
        function = getattr(nvml, "nvmlDeviceGetTotalEccErrors", None)
        fields: dict[str, int | None] = {}
        for name, error_type, counter in (
            ("ecc_corrected_volatile", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
            ("ecc_uncorrected_volatile", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
            ("ecc_corrected_aggregate", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
            ("ecc_uncorrected_aggregate", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
        ):
            count = self._health_call(device, name, function, getattr(nvml, error_type), getattr(nvml, counter))
            fields[name] = int(count) if count is not None else None
        return fields

    def _remapped_fields(self, device: _Device) -> dict[str, Any]:
        nvml, call = self._library, self._health_call
        rows = call(device, "remapped_rows", getattr(nvml, "nvmlDeviceGetRemappedRows", None))
        fields: dict[str, Any] = {
            "remapped_rows_correctable": int(rows[0]) if rows is not None else None,
            "remapped_rows_uncorrectable": int(rows[1]) if rows is not None else None,
            "remapped_rows_pending": bool(rows[2]) if rows is not None else None,
            "remapped_rows_failed": bool(rows[3]) if rows is not None else None,
            "retired_pages": None,
            "retired_pages_pending": None,
        }
        if rows is not None:
            return fields  # Ampere and later remap rows instead of retiring pages
        retired = getattr(nvml, "nvmlDeviceGetRetiredPages", None)
        single = call(device, "retired_pages", retired, nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        double = call(device, "retired_pages", retired, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        if single is not None and double is not None:
            fields["retired_pages"] = len(single) + len(double)
        pending = call(device, "retired_pages_pending", getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None))
        fields["retired_pages_pending"] = bool(pending) if pending is not None else None
        return fields

    def _find_nvlink(self, device: _Device) -> None:
        """Whether the GPU has NVLink: its counters answer (asked at health reads until they do, or until the GPU
        says it has none). The reading starts the fast tier's first rate."""
        totals = self._nvlink_totals(device)
        if totals is not None:
            device.nvlink_present = True
            device.nvlink_previous = (self._clock(), *totals)
            device.nvlink_rates = (None, None)

    def _nvlink_rates(self, device: _Device) -> tuple[float | None, float | None]:
        """NVLink data rx/tx in bytes/s from the KiB counters, over the time since their last reading (on the fast
        tier, where GPM lacks NVLink); read again no sooner than NVLINK_MIN_WINDOW, the last rate repeated till then."""
        previous = device.nvlink_previous
        now = self._clock()
        if previous is not None and now - previous[0] < NVLINK_MIN_WINDOW:
            return device.nvlink_rates
        totals = self._nvlink_totals(device)
        if totals is None:
            device.nvlink_previous, device.nvlink_rates = None, (None, None)
            return device.nvlink_rates
        device.nvlink_previous = (now, *totals)
        if previous is None or now <= previous[0] or totals[0] < previous[1] or totals[1] < previous[2]:
            device.nvlink_rates = (None, None)  # a first reading, or counters that went back (reset)
        else:
            seconds = now - previous[0]
            device.nvlink_rates = (
                (totals[0] - previous[1]) * 1024.0 / seconds,
                (totals[1] - previous[2]) * 1024.0 / seconds,
            )
        return device.nvlink_rates

    def _nvlink_totals(self, device: _Device) -> tuple[float, float] | None:
        """KiB received and sent over all NVLinks so far: the all-links scope, else the links summed one by one."""
        nvml = self._library
        function = getattr(nvml, "nvmlDeviceGetFieldValues", None)
        rx_field = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
        tx_field = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
        if rx_field is None or tx_field is None:
            return None
        if "nvlink_all" not in device.unsupported:
            values = self._health_call(device, "nvlink_all", function, [(rx_field, ALL_LINKS), (tx_field, ALL_LINKS)])
            if values is None:
                return None
            received, sent = _field_numbers(nvml, values)
            if received is not None and sent is not None:
                return received, sent
            device.unsupported.add("nvlink_all")  # the call works, the all-links scope does not: sum the links
        links = range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        per_link = [(field_id, link) for link in links for field_id in (rx_field, tx_field)]
        values = self._health_call(device, "nvlink_per_link", function, per_link)
        numbers = _field_numbers(nvml, values) if values is not None else []
        if all(number is None for number in numbers):
            if values is not None:
                device.unsupported.add("nvlink_per_link")  # no NVLink on this GPU
            return None
        return sum(number or 0.0 for number in numbers[0::2]), sum(number or 0.0 for number in numbers[1::2])

    # ---- MIG (slow tier) --------------------------------------------------------------------------

    def _mig_fields(self, device: _Device) -> dict[str, Any]:
        nvml = self._library
        mode = self._health_call(device, "mig", getattr(nvml, "nvmlDeviceGetMigMode", None))
        if mode is None:
            return {"mig_mode": None, "mig_instances": ()}
        enabled = int(mode[0]) == MIG_ENABLED
        return {"mig_mode": enabled, "mig_instances": self._mig_instances(device) if enabled else ()}

    def _mig_instances(self, device: _Device) -> tuple[MigSample, ...]:
        nvml, optional = self._library, self._optional
        count = self._health_call(device, "mig_count", getattr(nvml, "nvmlDeviceGetMaxMigDeviceCount", None)) or 0
        instances = []
        for slot in range(int(count)):
            handle = optional(nvml.nvmlDeviceGetMigDeviceHandleByIndex, device.handle, slot)
            if handle is None:
                continue  # an empty slot
            if device.memory_version is not None:
                memory = optional(nvml.nvmlDeviceGetMemoryInfo, handle, device.memory_version)
            else:
                memory = optional(nvml.nvmlDeviceGetMemoryInfo, handle)
            gpu_instance = optional(nvml.nvmlDeviceGetGpuInstanceId, handle)
            compute_instance = optional(nvml.nvmlDeviceGetComputeInstanceId, handle)
            instances.append(
                MigSample(
                    index=slot,
                    uuid=str(optional(nvml.nvmlDeviceGetUUID, handle) or ""),
                    name=str(optional(nvml.nvmlDeviceGetName, handle) or ""),
                    gpu_instance_id=int(gpu_instance) if gpu_instance is not None else None,
                    compute_instance_id=int(compute_instance) if compute_instance is not None else None,
                    memory_used=int(memory.used) if memory is not None else None,
                    memory_total=int(memory.total) if memory is not None else None,
                )
            )
        return tuple(instances)

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


def _field_numbers(nvml: NvmlModule, values: Any) -> list[float | None]:
    """The numbers of nvmlDeviceGetFieldValues' results, None for each field that failed."""
    members = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by NVML_VALUE_TYPE_*
    numbers: list[float | None] = []
    for value in values:
        if value.nvmlReturn != nvml.NVML_SUCCESS or not 0 <= value.valueType < len(members):
            numbers.append(None)
        else:
            numbers.append(float(getattr(value.value, members[value.valueType])))
    return numbers
