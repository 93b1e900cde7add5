"""The metric families of one Snapshot: per GPU, per process and for the host, named with their units.

Conventions: shares of time or capacity are `_ratio` in 0-1 (never percent); sizes are `_bytes`, rates
`_bytes_per_second`, clocks `_hertz`, power `_watts`, energy `_joules_total`, temperatures `_celsius`.
Every label value from outside (GPU names, commands, environment) goes through labels.label_value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpumon.exporter.labels import PLACEMENT_LABELS, PlacementCache, label_value, short_command
from gpumon.exporter.pods import NO_POD, POD_LABELS, PodAttribution
from gpumon.sampling.nvml_api import CLOCK_EVENT_NAMES
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot

GPU_LABELS = ("host", "gpu", "uuid", *POD_LABELS)
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
    GpuGauge("gpumon_gpu_power_limit_default_watts", "The card's default power limit.", "power_limit_default"),
    GpuGauge("gpumon_gpu_temperature_celsius", "GPU temperature.", "temperature"),
    GpuGauge("gpumon_gpu_clock_sm_hertz", "SM clock.", "clock_sm", MHZ),
    GpuGauge("gpumon_gpu_clock_memory_hertz", "Memory clock.", "clock_memory", MHZ),
    GpuGauge("gpumon_gpu_clock_sm_max_hertz", "Highest SM clock this GPU runs at.", "clock_sm_max", MHZ),
    GpuGauge("gpumon_gpu_fan_speed_ratio", "Fan speed, share of its maximum, 0-1.", "fan_speed", PERCENT),
    GpuGauge("gpumon_gpu_pcie_link_generation", "PCIe link generation now.", "pcie_link_gen"),
    GpuGauge("gpumon_gpu_pcie_link_width", "PCIe link lanes now.", "pcie_link_width"),
    GpuGauge(
        "gpumon_gpu_pcie_link_generation_max", "Highest PCIe generation of the GPU and slot.", "pcie_link_gen_max"
    ),
    GpuGauge("gpumon_gpu_pcie_link_width_max", "Most PCIe lanes of the GPU and slot.", "pcie_link_width_max"),
    GpuGauge("gpumon_gpu_nvlink_rx_bytes_per_second", "NVLink data received, all links.", "nvlink_rx"),
    GpuGauge("gpumon_gpu_nvlink_tx_bytes_per_second", "NVLink data sent, all links.", "nvlink_tx"),
    GpuGauge(
        "gpumon_gpu_remapped_rows_pending",
        "1 while a memory row remap waits for the next GPU reset.",
        "remapped_rows_pending",
    ),
    GpuGauge(
        "gpumon_gpu_remapped_rows_failed",
        "1 when a memory row remap failed: the GPU needs service.",
        "remapped_rows_failed",
    ),
    GpuGauge(
        "gpumon_gpu_retired_pages", "Memory pages retired after ECC errors (GPUs before Ampere).", "retired_pages"
    ),
    GpuGauge(
        "gpumon_gpu_retired_pages_pending",
        "1 while a page retirement waits for the next GPU reset.",
        "retired_pages_pending",
    ),
    GpuGauge("gpumon_gpu_mig_mode", "1 when the GPU is split into MIG instances.", "mig_mode"),
)
"""A GPU whose driver does not report a field has no series for it (no made-up zeros)."""

ECC_COUNTERS = (
    ("corrected", "volatile", "ecc_corrected_volatile"),
    ("uncorrected", "volatile", "ecc_uncorrected_volatile"),
    ("corrected", "aggregate", "ecc_corrected_aggregate"),
    ("uncorrected", "aggregate", "ecc_uncorrected_aggregate"),
)
"""(kind, scope, GpuSample field): volatile since the driver loaded, aggregate over the GPU's life."""
REMAPPED_ROWS = (("correctable", "remapped_rows_correctable"), ("uncorrectable", "remapped_rows_uncorrectable"))


def gpu_families(
    snapshot: Snapshot,
    host: str,
    energy: Mapping[str, float],
    xid: Mapping[str, XidTally] | None = None,
    pods: Mapping[str, tuple[str, str, str]] | None = None,
) -> Iterator[Metric]:
    """Every per-GPU family; `energy` maps a GPU uuid to the joules integrated from its sampled power (used where
    the driver has no energy counter), `xid` to the XID errors counted so far, `pods` to the POD_LABELS of the
    containers holding it (PodAttribution.gpu_labels)."""
    gpus = snapshot.gpus
    keys = [_gpu_key(gpu, host, pods) for gpu in gpus]
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
        "Energy drawn: the driver's counter since it loaded, else integrated from sampled "
        "power since the exporter started (source label).",
        labels=(*GPU_LABELS, "source"),
    )
    ecc = CounterMetricFamily(
        "gpumon_gpu_ecc_errors",
        "ECC errors: volatile since the driver loaded, aggregate over the GPU's life.",
        labels=(*GPU_LABELS, "kind", "scope"),
    )
    remapped = GaugeMetricFamily(
        "gpumon_gpu_remapped_rows",
        "Memory rows remapped, by the errors' cause (Ampere+).",
        labels=(*GPU_LABELS, "cause"),
    )
    xid_errors = CounterMetricFamily(
        "gpumon_gpu_xid_errors", "XID errors NVML reported since the exporter started.", labels=GPU_LABELS
    )
    last_xid = GaugeMetricFamily(
        "gpumon_gpu_last_xid", "The code of the last XID error seen, 0 for none yet.", labels=GPU_LABELS
    )
    mig_memory = GaugeMetricFamily(
        "gpumon_gpu_mig_memory_used_bytes",
        "Memory used in one MIG instance.",
        labels=(*GPU_LABELS, "mig", "mig_uuid", "profile"),
    )
    driver = label_value(snapshot.driver_version or "")
    for gpu, key in zip(gpus, keys, strict=True):
        info.add_metric((*key, label_value(gpu.name), driver), 1.0)
        if gpu.throttle_reasons is not None:
            active = set(gpu.throttle_reasons)
            for reason in (*THROTTLE_REASONS, *sorted(active.difference(THROTTLE_REASONS))):
                throttle.add_metric((*key, label_value(reason)), 1.0 if reason in active else 0.0)
        if gpu.energy_total is not None:
            joules.add_metric((*key, "driver"), gpu.energy_total)
        elif gpu.uuid in energy:
            joules.add_metric((*key, "integrated"), energy[gpu.uuid])
        for kind, scope, name in ECC_COUNTERS:
            count = getattr(gpu, name)
            if count is not None:
                ecc.add_metric((*key, kind, scope), float(count))
        for cause, name in REMAPPED_ROWS:
            rows = getattr(gpu, name)
            if rows is not None:
                remapped.add_metric((*key, cause), float(rows))
        tally = xid.get(gpu.uuid) if xid is not None else None
        if tally is not None:
            xid_errors.add_metric(key, float(tally.count))
            last_xid.add_metric(key, float(tally.last))
        for instance in gpu.mig_instances:
            if instance.memory_used is not None:
                mig_memory.add_metric(
                    (*key, str(instance.index), label_value(instance.uuid), label_value(instance.name)),
                    float(instance.memory_used),
                )
    yield from (info, throttle, joules, ecc, remapped, xid_errors, last_xid, mig_memory)


def _gpu_key(
    gpu: GpuSample, host: str, pods: Mapping[str, tuple[str, str, str]] | None
) -> tuple[str, str, str, str, str, str]:
    pod = pods.get(gpu.uuid, NO_POD) if pods is not None else NO_POD
    return (host, str(gpu.index), label_value(gpu.uuid), *pod)


def process_families(
    snapshot: Snapshot,
    host: str,
    placements: PlacementCache,
    full_command: bool = False,
    per_worker: bool = False,
    pods: PodAttribution | None = None,
) -> Iterator[Metric]:
    """Per process on a GPU or followed as a job's (role 'gpu', or 'worker' for one on no GPU), and per such process
    the count, CPU and RSS of its descendants that hold no GPU (e.g. DataLoader workers). Those descendants get
    series of their own (role 'worker') only with `per_worker`: their pids change at every restart, so each restart
    would leave a new set of series behind. A descendant on a GPU always has its own (role 'gpu'). `pods` completes
    a process's pod from the containers holding its GPUs."""
    gpu_at = {gpu.index: gpu for gpu in snapshot.gpus}
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
    workers = GaugeMetricFamily(
        "gpumon_process_workers",
        "Descendant processes on no GPU (e.g. DataLoader workers) of the process.",
        labels=PROCESS_LABELS,
    )
    workers_cpu = GaugeMetricFamily(
        "gpumon_process_workers_cpu_ratio",
        "CPU time of the process's workers together, in cores; absent where none was measured.",
        labels=PROCESS_LABELS,
    )
    workers_rss = GaugeMetricFamily(
        "gpumon_process_workers_resident_memory_bytes",
        "Resident host memory of the process's workers, summed (shared pages counted in each).",
        labels=PROCESS_LABELS,
    )
    seen: list[int] = []

    def key_of(process: ProcessSample, role: str) -> tuple[str, ...]:
        seen.append(process.pid)
        command = label_value(process.command) if full_command else short_command(process.command)
        gpus = ",".join(str(index) for index in process.gpu_indices)
        placement = placements.of(process.pid)
        if pods is not None and process.gpu_indices:
            placement = pods.process_placement(
                placement, [gpu_at[index] for index in process.gpu_indices if index in gpu_at]
            )
        return (host, str(process.pid), command, gpus, role, *placement.values())

    def add(process: ProcessSample, key: tuple[str, ...]) -> None:
        for family, value, scale in (
            (memory, process.gpu_memory, 1.0),
            (sm, process.sm_percent, PERCENT),
            (cpu, process.cpu_percent, PERCENT),
            (rss, process.rss, 1.0),
        ):
            if value is not None:
                family.add_metric(key, float(value) * scale)

    for process in snapshot.processes:
        key = key_of(process, "gpu" if process.gpu_indices else "worker")
        add(process, key)
        off_gpu = [child for child in process.children if not child.gpu_indices]
        for child in process.children:
            if child.gpu_indices or per_worker:
                add(child, key_of(child, "gpu" if child.gpu_indices else "worker"))
        workers.add_metric(key, float(len(off_gpu)))
        for family, values in (
            (workers_cpu, [child.cpu_percent * PERCENT for child in off_gpu if child.cpu_percent is not None]),
            (workers_rss, [float(child.rss) for child in off_gpu if child.rss is not None]),
        ):
            if values or not off_gpu:
                family.add_metric(key, sum(values))
    placements.keep_only(seen)
    yield from (memory, sm, cpu, rss, workers, workers_cpu, workers_rss)


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


@dataclass(frozen=True, slots=True)
class XidTally:
    """XID errors counted for one GPU: how many, the last code, and the newest event's time (to spot new ones)."""

    count: int = 0
    last: int = 0
    newest: float = float("-inf")


class XidCounter:
    """Counts the XID errors in the snapshots' sliding window of recent events, each once (by its timestamp).

    A GPU whose events are not watched (xid_events None) gets no tally, so it shows no series rather than a 0."""

    def __init__(self) -> None:
        self.tallies: dict[str, XidTally] = {}

    def add(self, snapshot: Snapshot) -> None:
        """Called on the sampling thread; `tallies` is replaced whole."""
        tallies = dict(self.tallies)
        for gpu in snapshot.gpus:
            if gpu.xid_events is None:
                continue
            tally = tallies.get(gpu.uuid, XidTally())
            new = sorted(
                (event for event in gpu.xid_events if event.timestamp > tally.newest), key=lambda event: event.timestamp
            )
            if new:
                tally = XidTally(count=tally.count + len(new), last=new[-1].xid, newest=new[-1].timestamp)
            tallies[gpu.uuid] = tally
        self.tallies = tallies
