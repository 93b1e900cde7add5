"""The slice of pynvml that gpumon calls, typed (pynvml has no hints), and how its errors and masks are read."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol, cast

MIB = 1024 * 1024

# Errors that mean "this field is not available here": the field is shown as absent.
ABSENT_ERRORS = (
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
# Absent errors that will not change while NVML stays up: the call is not tried again on that GPU.
PERMANENT_ABSENT_ERRORS = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
    "NVML_ERROR_DEPRECATED",
)
# Errors that mean this one GPU is gone.
DEVICE_LOST_ERRORS = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_GPU_NOT_FOUND")
# Errors that mean NVML as a whole stopped working (driver unloaded, library shut down...).
LIBRARY_ERRORS = (
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


def decode_clock_events(mask: int) -> tuple[str, ...]:
    """Short names of the bits set in an NVML clock-event (throttle) reason mask."""
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(CLOCK_EVENT_NAMES.get(bit, f"0x{bit:x}"))
        bit <<= 1
    return tuple(names)


class NvmlModule(Protocol):
    """The part of pynvml that GpuCollector calls directly (pynvml has no type hints); optional ones go via getattr.

    Each method and constant mirrors pynvml's of the same name (NVML's C function, nvmlDeviceGetName and so on: see
    NVIDIA's NVML API reference), typed as gpumon calls it. NVML handles, structs and GPM buffers are opaque ctypes
    objects, hence Any.
    """

    NVMLError: type[Exception]
    NVML_CLOCK_SM: int
    NVML_CLOCK_MEM: int
    NVML_TEMPERATURE_GPU: int
    NVML_GPM_METRICS_GET_VERSION: int
    NVML_SUCCESS: int
    NVML_MEMORY_ERROR_TYPE_CORRECTED: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    NVML_AGGREGATE_ECC: int
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: int
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: int
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: int
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: int
    NVML_NVLINK_MAX_LINKS: int
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
    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any, /) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int, /) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, /) -> int: ...
    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int, /) -> int: ...
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleFree(self, sample: Any, /) -> None: ...
    def nvmlGpmSampleGet(self, handle: Any, sample: Any, /) -> Any: ...
    def nvmlGpmMetricsGet(self, request: Any, /) -> Any: ...
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int, /) -> int: ...
    def nvmlDeviceGetFanSpeed(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int, /) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any, /) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int, /) -> list[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[tuple[int, int]], /) -> Any: ...
    def nvmlDeviceGetMigMode(self, handle: Any, /) -> list[int]: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int, /) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, handle: Any, /) -> int: ...
    def nvmlDeviceGetIndex(self, handle: Any, /) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any, /) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int, /) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any, /) -> None: ...


def import_pynvml() -> NvmlModule:
    """pynvml, typed as NvmlModule (an ImportError where it is not installed)."""
    return cast(NvmlModule, importlib.import_module("pynvml"))


def describe_error(error: BaseException) -> str:
    """An NVML error (or any exception) as one line: its text's first line, else its type's name."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
