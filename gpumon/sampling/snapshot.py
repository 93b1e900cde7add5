"""Immutable snapshot dataclasses: one sample of GPUs, CPU, disks and GPU processes, and their JSON form."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


XID_EVENTS_KEPT = 16
"""Recent XID errors kept per GPU."""


@dataclass(frozen=True, slots=True)
class MigSample:
    """One MIG instance of a GPU in MIG mode."""

    index: int
    """Its index under the parent GPU."""
    uuid: str = ""
    name: str = ""
    """E.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb"."""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_used: int | None = None
    """Bytes."""
    memory_total: int | None = None
    """Bytes."""

    @property
    def memory_percent(self) -> float | None:
        """Memory used as a percentage of the instance's total; None where either is unknown."""
        if self.memory_used is None or not self.memory_total:
            return None
        return 100.0 * self.memory_used / self.memory_total


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID error NVML reported for a GPU."""

    timestamp: float
    """Seconds since the epoch, when gpumon received it."""
    xid: int
    """The XID code (e.g. 79: the GPU fell off the bus)."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant. Every metric is None where the GPU or driver does not report it."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str | None = None
    """NVML's PCI bus id, e.g. "00000000:19:00.0" (read once; slow tier)."""
    utilization_gpu: float | None = None
    """Percent of time a kernel ran (nvidia-smi's GPU-Util; says nothing about how many SMs)."""
    utilization_memory: float | None = None
    """Percent of time device memory was read or written."""
    memory_used: int | None = None
    """Bytes."""
    memory_total: int | None = None
    """Bytes."""
    memory_free: int | None = None
    """Bytes NVML calls free: total less used and (with the v2 memory call) less what the driver reserves."""
    memory_reserved: int | None = None
    """Bytes the driver reserves (the v2 memory call; read once; slow tier)."""
    temperature: float | None = None
    """Degrees Celsius (slow tier)."""
    power: float | None = None
    """Watts."""
    power_limit: float | None = None
    """Watts."""
    clock_sm: int | None = None
    """MHz."""
    clock_memory: int | None = None
    """MHz."""
    throttle_reasons: tuple[str, ...] | None = None
    """Active clock-event reasons, e.g. ("sw_power_cap",); empty when none (slow tier)."""
    pcie_rx: float | None = None
    """Bytes/s the PCIe link carried into the GPU: link traffic, protocol overhead included, so above the copies'
    payload (on an H200, a pinned copy moving 27.7 GB/s each way read 29.6 in; benchmarks/pcie_gpm_check.py)."""
    pcie_tx: float | None = None
    """Bytes/s the PCIe link carried out of the GPU, the read requests of host-to-GPU copies included (31.9 for that
    copy)."""
    sm_activity: float | None = None
    """GPM percent of time-averaged SMs busy (Hopper+)."""
    sm_occupancy: float | None = None
    """GPM percent of warp slots resident (Hopper+)."""
    tensor_activity: float | None = None
    """GPM percent of cycles any tensor pipe was active (Hopper+)."""
    dram_bandwidth: float | None = None
    """GPM percent of peak DRAM bandwidth used (Hopper+)."""
    graphics_activity: float | None = None
    """GPM percent of time the graphics/compute engine was busy (Hopper+; DCGM's GR_ENGINE_ACTIVE)."""
    # ---- health (slow tier; None where the GPU or driver does not report it)
    clock_sm_max: int | None = None
    """MHz: the highest SM clock this GPU runs at (read once)."""
    power_limit_default: float | None = None
    """Watts: the card's default power limit (nvmlDeviceGetPowerManagementDefaultLimit); `power_limit` below it was
    lowered (nvidia-smi -pl)."""
    fan_speed: float | None = None
    """Percent of the fan's maximum speed (None on passively cooled GPUs)."""
    pcie_link_gen: int | None = None
    """The PCIe link's generation now (idle GPUs may step it down to save power)."""
    pcie_link_width: int | None = None
    """The PCIe link's lanes now."""
    pcie_link_gen_max: int | None = None
    """The highest generation the GPU and its slot can run together."""
    pcie_link_width_max: int | None = None
    """The most lanes the GPU and its slot can run together."""
    energy_total: float | None = None
    """Joules consumed since the driver was loaded."""
    nvlink_rx: float | None = None
    """Bytes/s of NVLink data received, all links together, over the sample's own interval."""
    nvlink_tx: float | None = None
    """Bytes/s of NVLink data sent, all links together, over the sample's own interval."""
    memory_temperature: float | None = None
    """Degrees Celsius of the memory (HBM), where NVML reports it."""
    pcie_replays: int | None = None
    """PCIe replays (retries) counted by the GPU."""
    encoder_utilization: float | None = None
    """Percent of time the video encoder was busy."""
    decoder_utilization: float | None = None
    """Percent of time the video decoder was busy."""
    ecc_corrected_volatile: int | None = None
    """Corrected ECC errors since the last driver load."""
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    """Corrected ECC errors over the GPU's life."""
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    """Memory rows remapped after correctable errors (Ampere+)."""
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    """A remap waits for the next GPU reset."""
    remapped_rows_failed: bool | None = None
    """A remap failed: the GPU needs service."""
    retired_pages: int | None = None
    """Memory pages retired after ECC errors (before Ampere), both causes."""
    retired_pages_pending: bool | None = None
    mig_mode: bool | None = None
    """MIG mode is on (the GPU is split into MIG instances)."""
    mig_instances: tuple[MigSample, ...] = ()
    xid_events: tuple[XidEvent, ...] | None = None
    """The most recent XID errors (at most XID_EVENTS_KEPT); None where they are not watched."""

    @property
    def memory_percent(self) -> float | None:
        """Memory used as a percentage of the total; None where either is unknown."""
        if self.memory_used is None or not self.memory_total:
            return None
        return 100.0 * self.memory_used / self.memory_total

    @property
    def has_gpm(self) -> bool:
        """Whether the GPM metrics (SM and tensor activity, ...) were read on this GPU."""
        return self.sm_activity is not None


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Host CPU, memory and swap at one instant."""

    per_core: tuple[float, ...] = ()
    """Percent busy per logical core since the previous sample."""
    total: float = 0.0
    """Percent busy over all cores."""
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """1, 5 and 15 minute load averages."""
    iowait: float | None = None
    """Percent of CPU time waiting on I/O (Linux)."""
    memory_used: int = 0
    """Bytes."""
    memory_total: int = 0
    """Bytes."""
    swap_used: int = 0
    """Bytes."""
    swap_total: int = 0
    """Bytes."""

    @property
    def memory_percent(self) -> float | None:
        """Host memory used as a percentage of the total; None without a total."""
        return 100.0 * self.memory_used / self.memory_total if self.memory_total else None


@dataclass(frozen=True, slots=True)
class DiskSample:
    """One block device's throughput since the previous sample."""

    name: str
    read_bytes_per_s: float = 0.0
    write_bytes_per_s: float = 0.0
    read_iops: float = 0.0
    write_iops: float = 0.0


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """A process using a GPU, or one of its descendants (e.g. a DataLoader worker)."""

    pid: int
    ppid: int | None = None
    user: str | None = None
    command: str = ""
    gpu_indices: tuple[int, ...] = ()
    """GPUs this process holds a context on; empty for workers."""
    gpu_memory: int | None = None
    """Bytes of GPU memory, summed over its GPUs; None where NVML hides it."""
    sm_percent: float | None = None
    """Per-process SM utilization where NVML gives it; for the only process on a GPU, that GPU's utilization."""
    cpu_percent: float | None = None
    """Percent of one core."""
    rss: int | None = None
    """Bytes."""
    state: str | None = None
    """psutil status: running, sleeping, disk-sleep, zombie..."""
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    children: tuple[ProcessSample, ...] = ()
    """Descendants (DataLoader workers and the like), each with no further nesting."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything gpumon samples at one instant."""

    timestamp: float
    """Seconds since the epoch."""
    gpus: tuple[GpuSample, ...] = ()
    gpu_error: str | None = None
    """Why no GPU data is shown (no driver, NVML failed...), one line; None when NVML works."""
    driver_version: str | None = None
    cpu: CpuSample = field(default_factory=CpuSample)
    disks: tuple[DiskSample, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    hostname: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as plain JSON-ready data (from_dict reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object) -> Snapshot:
        """Build a snapshot from its JSON form, checking every field's type and range (docs/schema.md).

        Raises ValueError naming the field: "gpus[0].utilization_gpu: expected a percentage, got 'NaN'"."""
        fields_ = _fields(data, "snapshot")
        return cls(
            timestamp=_required(fields_, "timestamp", _timestamp, ""),
            gpus=_optional(fields_, "gpus", _list_of(_gpu, most=MAX_GPUS), "", ()),
            gpu_error=_optional(fields_, "gpu_error", _text_or_none, "", None),
            driver_version=_optional(fields_, "driver_version", _text_or_none, "", None),
            cpu=_optional(fields_, "cpu", _cpu, "", CpuSample()),
            disks=_optional(fields_, "disks", _list_of(_disk), "", ()),
            processes=_optional(fields_, "processes", _list_of(_process), "", ()),
            hostname=_optional(fields_, "hostname", _text, "", ""),
        )


# ---------------------------------------------------------------------------------------------
# Reading the JSON form back: every value checked, the first bad one named by its path.

MAX_MAGNITUDE = 2.0**63
"""No figure of the schema comes near this; larger ones are corrupt (and would overflow formatting)."""
PERCENT_CEILING = 101.0
"""Percentages are 0-100; a rounding hair above 100 is allowed."""
MAX_TIMESTAMP = 1e11
"""Seconds since the epoch (year 5138): later is corrupt, and datetime could not show it."""
_SHOWN_CHARS = 40

Checker = Callable[[object, str], Any]


def _got(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 3] + "..."


def _fields(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {_got(value)}")
    return value


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _required(data: dict[str, Any], name: str, check: Checker, where: str) -> Any:
    if name not in data:
        raise ValueError(f"{_join(where, name)}: missing")
    return check(data[name], _join(where, name))


def _optional(data: dict[str, Any], name: str, check: Checker, where: str, default: Any) -> Any:
    return check(data[name], _join(where, name)) if name in data else default


def _real(value: object, where: str, expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected {expected}, got {_got(value)}")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"{where}: expected {expected}, got {_got(value)}")
    return value


def _number(value: object, where: str) -> float:
    return _real(value, where, "a number")


def _non_negative(value: object, where: str) -> float:
    number = _real(value, where, "a non-negative number")
    if number < 0:
        raise ValueError(f"{where}: expected a non-negative number, got {_got(value)}")
    return number


def _percent(value: object, where: str) -> float:
    number = _real(value, where, "a percentage (0-100)")
    if not 0 <= number <= PERCENT_CEILING:
        raise ValueError(f"{where}: expected a percentage (0-100), got {_got(value)}")
    return number


def _count(value: object, where: str) -> int:
    """A non-negative whole number: bytes, an index, a pid, MHz."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_MAGNITUDE:
        raise ValueError(f"{where}: expected a non-negative integer, got {_got(value)}")
    return value


def _timestamp(value: object, where: str) -> float:
    number = _real(value, where, "seconds since the epoch")
    if not 0 <= number <= MAX_TIMESTAMP:
        raise ValueError(f"{where}: expected seconds since the epoch, got {_got(value)}")
    return float(number)


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: expected a string, got {_got(value)}")
    return value


def _or_none(check: Checker) -> Checker:
    return lambda value, where: None if value is None else check(value, where)


_text_or_none = _or_none(_text)


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {_got(value)}")
    return value


def _list_of(check: Checker, length: int | None = None, most: int | None = None) -> Checker:
    def checked(value: object, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {_got(value)}")
        if length is not None and len(value) != length:
            raise ValueError(f"{where}: expected a list of {length}, got {len(value)} items")
        if most is not None and len(value) > most:
            raise ValueError(f"{where}: expected at most {most} items, got {len(value)}")
        return tuple(check(item, f"{where}[{index}]") for index, item in enumerate(value))

    return checked


def _xid_event(value: object, where: str) -> XidEvent:
    data = _fields(value, where)
    return XidEvent(
        timestamp=_required(data, "timestamp", _timestamp, where), xid=_required(data, "xid", _count, where)
    )


_GPU_FIGURES: dict[str, Checker] = {
    "pci_bus_id": _text,
    "utilization_gpu": _percent,
    "utilization_memory": _percent,
    "memory_used": _count,
    "memory_total": _count,
    "memory_free": _count,
    "memory_reserved": _count,
    "temperature": _number,
    "power": _non_negative,
    "power_limit": _non_negative,
    "clock_sm": _count,
    "clock_memory": _count,
    "throttle_reasons": _list_of(_text),
    "pcie_rx": _non_negative,
    "pcie_tx": _non_negative,
    "sm_activity": _percent,
    "sm_occupancy": _percent,
    "tensor_activity": _percent,
    "dram_bandwidth": _percent,
    "graphics_activity": _percent,
    "clock_sm_max": _count,
    "power_limit_default": _non_negative,
    "fan_speed": _percent,
    "pcie_link_gen": _count,
    "pcie_link_width": _count,
    "pcie_link_gen_max": _count,
    "pcie_link_width_max": _count,
    "energy_total": _non_negative,
    "nvlink_rx": _non_negative,
    "nvlink_tx": _non_negative,
    "memory_temperature": _number,
    "pcie_replays": _count,
    "encoder_utilization": _percent,
    "decoder_utilization": _percent,
    "ecc_corrected_volatile": _count,
    "ecc_uncorrected_volatile": _count,
    "ecc_corrected_aggregate": _count,
    "ecc_uncorrected_aggregate": _count,
    "remapped_rows_correctable": _count,
    "remapped_rows_uncorrectable": _count,
    "remapped_rows_pending": _flag,
    "remapped_rows_failed": _flag,
    "retired_pages": _count,
    "retired_pages_pending": _flag,
    "mig_mode": _flag,
    "xid_events": _list_of(_xid_event, most=XID_EVENTS_KEPT),
}
"""GpuSample's optional figures (each may be null)."""

MAX_GPUS = 64
"""GPUs in one snapshot at most (the largest nodes hold 16): a recording line with more is refused, not loaded (each
GPU costs the history about 570 KB: 7,000 of them in a 3.3 MB recording took 4 GB)."""
MAX_MIG_INSTANCES = 64
"""More MIG instances than any GPU can hold (7 on an H100) means a corrupt line."""


def _gpu(value: object, where: str) -> GpuSample:
    data = _fields(value, where)
    figures = {name: _optional(data, name, _or_none(check), where, None) for name, check in _GPU_FIGURES.items()}
    return GpuSample(
        index=_required(data, "index", _count, where),
        uuid=_required(data, "uuid", _text, where),
        name=_required(data, "name", _text, where),
        mig_instances=_optional(data, "mig_instances", _list_of(_mig, most=MAX_MIG_INSTANCES), where, ()),
        **figures,
    )


_MIG_FIGURES: dict[str, Checker] = {
    "gpu_instance_id": _count,
    "compute_instance_id": _count,
    "memory_used": _count,
    "memory_total": _count,
}
"""MigSample's optional figures (each may be null)."""


def _mig(value: object, where: str) -> MigSample:
    data = _fields(value, where)
    figures = {name: _optional(data, name, _or_none(check), where, None) for name, check in _MIG_FIGURES.items()}
    return MigSample(
        index=_required(data, "index", _count, where),
        uuid=_optional(data, "uuid", _text, where, ""),
        name=_optional(data, "name", _text, where, ""),
        **figures,
    )


def _cpu(value: object, where: str) -> CpuSample:
    data = _fields(value, where)
    return CpuSample(
        per_core=_optional(data, "per_core", _list_of(_percent), where, ()),
        total=float(_optional(data, "total", _percent, where, 0.0)),
        load=_optional(data, "load", _list_of(_non_negative, length=3), where, (0.0, 0.0, 0.0)),
        iowait=_optional(data, "iowait", _or_none(_percent), where, None),
        **{
            name: _optional(data, name, _count, where, 0)
            for name in ("memory_used", "memory_total", "swap_used", "swap_total")
        },
    )


def _disk(value: object, where: str) -> DiskSample:
    data = _fields(value, where)
    rates = {
        name: float(_optional(data, name, _non_negative, where, 0.0))
        for name in ("read_bytes_per_s", "write_bytes_per_s", "read_iops", "write_iops")
    }
    return DiskSample(name=_required(data, "name", _text, where), **rates)


_PROCESS_FIGURES: dict[str, Checker] = {
    "ppid": _count,
    "user": _text,
    "gpu_memory": _count,
    "sm_percent": _percent,
    "cpu_percent": _non_negative,
    "rss": _count,
    "state": _text,
    "read_bytes_per_s": _non_negative,
    "write_bytes_per_s": _non_negative,
}
"""ProcessSample's optional figures (each may be null)."""


def _process(value: object, where: str) -> ProcessSample:
    data = _fields(value, where)
    figures = {name: _optional(data, name, _or_none(check), where, None) for name, check in _PROCESS_FIGURES.items()}
    return ProcessSample(
        pid=_required(data, "pid", _count, where),
        command=_optional(data, "command", _text, where, ""),
        gpu_indices=_optional(data, "gpu_indices", _list_of(_count), where, ()),
        children=_optional(data, "children", _list_of(_process), where, ()),
        **figures,
    )
