"""The metric families of one Snapshot: per GPU, per process and for the host, named with their units.

Conventions: shares of time or capacity are `_ratio` in 0-1 (never percent); sizes are `_bytes`, rates
`_bytes_per_second`, clocks `_hertz`, power `_watts`, energy `_joules_total`, temperatures `_celsius`.
Every label value from outside (GPU names, commands, environment) goes through labels.label_value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpumon.exporter.labels import PLACEMENT_LABELS, PlacementCache, label_value, short_command
from gpumon.sampling.nvml import CLOCK_EVENT_NAMES
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot

GPU_LABELS = ("host", "gpu", "uuid")
PROCESS_LABELS = ("host", "pid", "command", "gpu", "role", *PLACEMENT_LABELS)
MHZ = 1e6
PERCENT = 0.01
THROTTLE_REASONS = tuple(CLOCK_EVENT_NAMES.values())
"""Every clock-event reason NVML names: one series each, 1 while active, 0 otherwise."""


@dataclass(frozen=True, slots=True)
class GpuGauge:
    """One per-GPU gauge: its name, help, the GpuSample field it reads and the factor to its unit."""

    name: str
    help: str
    field: str
    scale: float = 1.0


GPU_GAUGES = (
    GpuGauge(
        "gpumon_gpu_utilization_ratio",
        "Share of time a kernel ran (nvidia-smi GPU-Util), 0-1.",
        "utilization_gpu",
        PERCENT,
    ),
    GpuGauge(
        "gpumon_gpu_memory_utilization_ratio",
        "Share of time device memory was read or written, 0-1.",
        "utilization_memory",
        PERCENT,
    ),
    GpuGauge("gpumon_gpu_memory_used_bytes", "Device memory in use.", "memory_used"),
    GpuGauge("gpumon_gpu_memory_total_bytes", "Device memory in all.", "memory_total"),
    GpuGauge(
        "gpumon_gpu_sm_active_ratio",
        "GPM: time-averaged share of SMs busy, 0-1 (Hopper and later).",
        "sm_activity",
        PERCENT,
    ),
    GpuGauge(
        "gpumon_gpu_sm_occupancy_ratio",
        "GPM: share of warp slots resident, 0-1 (Hopper and later).",
        "sm_occupancy",
        PERCENT,
    ),
    GpuGauge(
        "gpumon_gpu_tensor_active_ratio",
        "GPM: share of cycles a tensor pipe was active, 0-1.",
        "tensor_activity",
        PERCENT,
    ),
    GpuGauge("gpumon_gpu_dram_active_ratio", "GPM: share of peak DRAM bandwidth used, 0-1.", "dram_bandwidth", PERCENT),
    GpuGauge("gpumon_gpu_pcie_rx_bytes_per_second", "PCIe traffic host to device.", "pcie_rx"),
    GpuGauge("gpumon_gpu_pcie_tx_bytes_per_second", "PCIe traffic device to host.", "pcie_tx"),
    GpuGauge("gpumon_gpu_power_watts", "Power draw.", "power"),
    GpuGauge("gpumon_gpu_power_limit_watts", "Power limit.", "power_limit"),
    GpuGauge("gpumon_gpu_temperature_celsius", "GPU temperature.", "temperature"),
    GpuGauge("gpumon_gpu_clock_sm_hertz", "SM clock.", "clock_sm", MHZ),
    GpuGauge("gpumon_gpu_clock_memory_hertz", "Memory clock.", "clock_memory", MHZ),
)
"""A GPU whose driver does not report a field has no series for it (no made-up zeros)."""

XID_HELP = (
    "XID errors seen. NOT SAMPLED YET: gpumon does not read NVML XID events, so this stays 0; "
    "it exists so alert rules and dashboards can be written against its final name."
)


def gpu_families(snapshot: Snapshot, host: str, energy: dict[str, float]) -> Iterator[Metric]:
    """Every per-GPU family; `energy` maps a GPU uuid to the joules integrated from its sampled power."""
    gpus = snapshot.gpus
    keys = [_gpu_key(gpu, host) for gpu in gpus]
    for gauge in GPU_GAUGES:
        family = GaugeMetricFamily(gauge.name, gauge.help, labels=GPU_LABELS)
        for gpu, key in zip(gpus, keys, strict=True):
            value = getattr(gpu, gauge.field)
            if value is not None:
                family.add_metric(key, float(value) * gauge.scale)
        yield family
    info = GaugeMetricFamily(
        "gpumon_gpu_info", "Always 1: the GPU's model and driver as labels.", labels=(*GPU_LABELS, "model", "driver")
    )
    throttle = GaugeMetricFamily(
        "gpumon_gpu_throttle_reason",
        "1 while this clock-event (throttle) reason is active, else 0.",
        labels=(*GPU_LABELS, "reason"),
    )
    joules = CounterMetricFamily(
        "gpumon_gpu_energy_joules",
        "Energy drawn since the exporter started, integrated from sampled power.",
        labels=GPU_LABELS,
    )
    xid = CounterMetricFamily("gpumon_gpu_xid_errors", XID_HELP, labels=GPU_LABELS)
    driver = label_value(snapshot.driver_version or "")
    for gpu, key in zip(gpus, keys, strict=True):
        info.add_metric((*key, label_value(gpu.name), driver), 1.0)
        if gpu.throttle_reasons is not None:
            active = set(gpu.throttle_reasons)
            for reason in (*THROTTLE_REASONS, *sorted(active.difference(THROTTLE_REASONS))):
                throttle.add_metric((*key, label_value(reason)), 1.0 if reason in active else 0.0)
        if gpu.uuid in energy:
            joules.add_metric(key, energy[gpu.uuid])
        xid.add_metric(key, 0.0)
    yield from (info, throttle, joules, xid)


def _gpu_key(gpu: GpuSample, host: str) -> tuple[str, str, str]:
    return (host, str(gpu.index), label_value(gpu.uuid))


def process_families(
    snapshot: Snapshot, host: str, placements: PlacementCache, full_command: bool = False
) -> Iterator[Metric]:
    """Per process on a GPU (role 'gpu') and each of its descendants (role 'worker', e.g. DataLoader workers)."""
    memory = GaugeMetricFamily(
        "gpumon_process_gpu_memory_bytes", "GPU memory the process holds, over its GPUs.", labels=PROCESS_LABELS
    )
    sm = GaugeMetricFamily(
        "gpumon_process_sm_ratio", "The process's share of SM time where NVML gives it, 0-1.", labels=PROCESS_LABELS
    )
    cpu = GaugeMetricFamily(
        "gpumon_process_cpu_ratio", "CPU time of the process, in cores (1.0 = one core busy).", labels=PROCESS_LABELS
    )
    rss = GaugeMetricFamily(
        "gpumon_process_resident_memory_bytes", "Resident host memory of the process.", labels=PROCESS_LABELS
    )
    seen: list[int] = []
    for process, role in _with_workers(snapshot.processes):
        seen.append(process.pid)
        command = label_value(process.command) if full_command else short_command(process.command)
        gpus = ",".join(str(index) for index in process.gpu_indices)
        key = (host, str(process.pid), command, gpus, role, *placements.of(process.pid).values())
        for family, value, scale in (
            (memory, process.gpu_memory, 1.0),
            (sm, process.sm_percent, PERCENT),
            (cpu, process.cpu_percent, PERCENT),
            (rss, process.rss, 1.0),
        ):
            if value is not None:
                family.add_metric(key, float(value) * scale)
    placements.keep_only(seen)
    yield from (memory, sm, cpu, rss)


def _with_workers(processes: Sequence[ProcessSample]) -> Iterator[tuple[ProcessSample, str]]:
    for process in processes:
        yield process, "gpu" if process.gpu_indices else "worker"
        for child in process.children:
            yield child, "worker"


def host_families(snapshot: Snapshot, host: str) -> Iterator[Metric]:
    """The host's CPU and memory, how old the data is, and whether GPUs could be read at all."""
    labels = ("host",)
    cpu = GaugeMetricFamily("gpumon_host_cpu_utilization_ratio", "Share of all cores busy, 0-1.", labels=labels)
    cpu.add_metric((host,), snapshot.cpu.total * PERCENT)
    used = GaugeMetricFamily("gpumon_host_memory_used_bytes", "Host memory in use.", labels=labels)
    used.add_metric((host,), float(snapshot.cpu.memory_used))
    total = GaugeMetricFamily("gpumon_host_memory_total_bytes", "Host memory in all.", labels=labels)
    total.add_metric((host,), float(snapshot.cpu.memory_total))
    stamp = GaugeMetricFamily(
        "gpumon_snapshot_timestamp_seconds",
        "When the exported sample was taken (seconds since the epoch).",
        labels=labels,
    )
    stamp.add_metric((host,), snapshot.timestamp)
    gpu_up = GaugeMetricFamily(
        "gpumon_gpu_sampling_up", "1 when NVML answers, 0 when GPUs cannot be read.", labels=(*labels, "error")
    )
    gpu_up.add_metric((host, label_value(snapshot.gpu_error or "")), 0.0 if snapshot.gpu_error else 1.0)
    yield from (cpu, used, total, stamp, gpu_up)


class EnergyMeter:
    """Joules per GPU uuid, integrated from each sample's power over the gap to the next (gaps over `max_gap` s,
    a paused or stalled sampler, are skipped rather than guessed)."""

    def __init__(self, max_gap: float = 30.0) -> None:
        self.max_gap = max_gap
        self.joules: dict[str, float] = {}
        self._last: dict[str, tuple[float, float]] = {}

    def add(self, snapshot: Snapshot) -> None:
        """Called on the sampling thread; `joules` is replaced whole, so a scrape on another thread reads a
        consistent dict."""
        joules = dict(self.joules)
        for gpu in snapshot.gpus:
            if gpu.power is None:
                continue
            previous = self._last.get(gpu.uuid)
            self._last[gpu.uuid] = (snapshot.timestamp, gpu.power)
            joules.setdefault(gpu.uuid, 0.0)
            if previous is not None and 0 < snapshot.timestamp - previous[0] <= self.max_gap:
                gap = snapshot.timestamp - previous[0]
                joules[gpu.uuid] += gap * (previous[1] + gpu.power) / 2
        self.joules = joules
