"""Immutable snapshot dataclasses: one sample of GPUs, CPU, disks and GPU processes, and their JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant. Every metric is None where the GPU or driver does not report it."""

    index: int
    uuid: str
    name: str
    utilization_gpu: float | None = None
    """Percent of time a kernel ran (nvidia-smi's GPU-Util; says nothing about how many SMs)."""
    utilization_memory: float | None = None
    """Percent of time device memory was read or written."""
    memory_used: int | None = None
    """Bytes."""
    memory_total: int | None = None
    """Bytes."""
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
    """Bytes/s host to device."""
    pcie_tx: float | None = None
    """Bytes/s device to host."""
    sm_activity: float | None = None
    """GPM percent of time-averaged SMs busy (Hopper+)."""
    sm_occupancy: float | None = None
    """GPM percent of warp slots resident (Hopper+)."""
    tensor_activity: float | None = None
    """GPM percent of cycles any tensor pipe was active (Hopper+)."""
    dram_bandwidth: float | None = None
    """GPM percent of peak DRAM bandwidth used (Hopper+)."""

    @property
    def memory_percent(self) -> float | None:
        if self.memory_used is None or not self.memory_total:
            return None
        return 100.0 * self.memory_used / self.memory_total

    @property
    def has_gpm(self) -> bool:
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
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        """Build a snapshot from its JSON form; raises ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a snapshot must be a JSON object")
        try:
            return cls(
                timestamp=float(data["timestamp"]),
                gpus=tuple(_build(GpuSample, gpu) for gpu in data.get("gpus", ())),
                gpu_error=data.get("gpu_error"),
                driver_version=data.get("driver_version"),
                cpu=_build(CpuSample, data.get("cpu", {})),
                disks=tuple(_build(DiskSample, disk) for disk in data.get("disks", ())),
                processes=tuple(_process(proc) for proc in data.get("processes", ())),
                hostname=str(data.get("hostname", "")),
            )
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"not a gpumon snapshot ({type(error).__name__}: {error})") from None


def _build(cls: type, data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    values = {key: _tuples(value) for key, value in data.items() if key in known}
    return cls(**values)


def _process(data: dict[str, Any]) -> ProcessSample:
    children = tuple(_process(child) for child in data.get("children", ()))
    return replace(_build(ProcessSample, {**data, "children": ()}), children=children)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value
