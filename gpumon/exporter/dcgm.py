"""dcgm-exporter's names for the fields gpumon samples (`gpumon exporter --dcgm-names`), in DCGM's units and labels,
so dashboards and alerts written for dcgm-exporter read gpumon unchanged.

Names, types and units follow dcgm-exporter's etc/default-counters.csv and etc/dcp-metrics-included.csv; labels
its own: gpu, UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, and namespace, pod, container
where a pod holds the GPU. DCGM's units differ from gpumon's: utilization in percent 0-100, framebuffer in MiB, clocks
in MHz, energy in mJ, the DCGM_FI_PROF_* activities ratios 0-1. A field the snapshot lacks has no series (no made-up
zeros). DCGM's counters are typed counter under DCGM's own names (see ExactCounterType).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import Metric

from gpumon.exporter.labels import label_value
from gpumon.sampling.nvml_api import CLOCK_EVENT_NAMES, MIB
from gpumon.sampling.snapshot import GpuSample, Snapshot

DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
POD_LABELS = ("namespace", "pod", "container")
"""Added, as dcgm-exporter adds them on Kubernetes, to the series of a GPU a pod holds."""
PERCENT_TO_RATIO = 0.01
JOULES_TO_MILLIJOULES = 1000.0
BYTES_TO_MEGABYTES = 1e-6
CLOCK_EVENT_BITS = {name: bit for bit, name in CLOCK_EVENT_NAMES.items()}


class ExactCounterType(str):
    """The type 'counter' as prometheus_client's text exposition does not recognise it, so the family keeps DCGM's
    name (a plain counter would be written NAME_total) while both expositions still say 'counter'."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return other is self

    def __ne__(self, other: object) -> bool:
        return other is not self

    __hash__ = str.__hash__


COUNTER = ExactCounterType("counter")


def nvlink_megabytes(gpu: GpuSample) -> float | None:
    """NVLink data received and sent, in MB/s: what DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL reads in practice."""
    if gpu.nvlink_rx is None or gpu.nvlink_tx is None:
        return None
    return (gpu.nvlink_rx + gpu.nvlink_tx) * BYTES_TO_MEGABYTES


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One DCGM field: its name, Prometheus type ('gauge' or 'counter'), help, and how it is read from a GpuSample
    (a field name, or a function of the sample)."""

    name: str
    kind: str
    help: str
    field: str | Callable[[GpuSample], float | None]
    scale: float = 1.0

    def value(self, gpu: GpuSample) -> float | None:
        """The DCGM value of `gpu`, in DCGM's unit; None where the sample lacks it."""
        raw = self.field(gpu) if callable(self.field) else getattr(gpu, self.field)
        return float(raw) * self.scale if raw is not None else None


DCGM_FIELDS = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "clock_sm"),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "clock_memory"),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "memory_temperature"),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature"),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power"),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since the driver loaded (in mJ).",
        "energy_total",
        JOULES_TO_MILLIJOULES,
    ),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "pcie_replays"),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization_gpu"),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "utilization_memory"),
    DcgmField("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "encoder_utilization"),
    DcgmField("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "decoder_utilization"),
    DcgmField("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory_free", 1 / MIB),
    DcgmField("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory_used", 1 / MIB),
    DcgmField("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "memory_reserved", 1 / MIB),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes (NVLink data received and sent, in MB/s).",
        nvlink_megabytes,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "ecc_corrected_volatile",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "ecc_uncorrected_volatile",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "ecc_corrected_aggregate",
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "ecc_uncorrected_aggregate",
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "remapped_rows_uncorrectable",
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "remapped_rows_correctable",
    ),
    DcgmField("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "remapped_rows_failed"),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending", "remapped_rows_pending"
    ),
    DcgmField(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        "graphics_activity",
        PERCENT_TO_RATIO,
    ),
    DcgmField(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_activity",
        PERCENT_TO_RATIO,
    ),
    DcgmField(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "The ratio of number of warps resident on an SM.",
        "sm_occupancy",
        PERCENT_TO_RATIO,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_activity",
        PERCENT_TO_RATIO,
    ),
    DcgmField(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_bandwidth",
        PERCENT_TO_RATIO,
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus (in bytes per second).",
        "pcie_tx",
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus (in bytes per second).",
        "pcie_rx",
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink (in bytes per second).",
        "nvlink_tx",
    ),
    DcgmField(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink (in bytes per second).",
        "nvlink_rx",
    ),
)
"""Field by field from the GpuSample; the XID and clock-event fields are worked out in dcgm_families."""


def dcgm_families(
    snapshot: Snapshot,
    host: str,
    last_xid: Mapping[str, int],
    pods: Mapping[str, tuple[str, str, str]] | None = None,
) -> Iterator[Metric]:
    """The DCGM-named families of `snapshot`; `last_xid` maps a watched GPU's uuid to its last XID code (0: none),
    `pods` a GPU's uuid to the (namespace, pod, container) holding it ('' for none)."""
    driver = label_value(snapshot.driver_version or "")
    keys = [_labels(gpu, host, driver, (pods or {}).get(gpu.uuid)) for gpu in snapshot.gpus]
    for dcgm in DCGM_FIELDS:
        family = _family(dcgm.name, dcgm.kind, dcgm.help)
        for gpu, labels in zip(snapshot.gpus, keys, strict=True):
            value = dcgm.value(gpu)
            if value is not None:
                family.add_sample(dcgm.name, labels, value)
        yield family
    xid = _family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.")
    reasons = _family(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
    )
    for gpu, labels in zip(snapshot.gpus, keys, strict=True):
        if gpu.uuid in last_xid:
            xid.add_sample(xid.name, labels, float(last_xid[gpu.uuid]))
        mask = throttle_mask(gpu.throttle_reasons)
        if mask is not None:
            reasons.add_sample(reasons.name, labels, float(mask))
    yield from (xid, reasons)


def throttle_mask(reasons: tuple[str, ...] | None) -> int | None:
    """NVML's clock-event bitmask back from the reason names the sampler gave it ('0x8000' for a bit it had no name
    for); None when the reasons were not read."""
    if reasons is None:
        return None
    mask = 0
    for reason in reasons:
        bit = CLOCK_EVENT_BITS.get(reason)
        if bit is None and reason.startswith("0x"):
            try:
                bit = int(reason, 16)
            except ValueError:
                bit = None
        mask |= bit or 0
    return mask


def _labels(gpu: GpuSample, host: str, driver: str, pod: tuple[str, str, str] | None) -> dict[str, str]:
    bus_id = label_value(gpu.pci_bus_id or "")
    values = (str(gpu.index), label_value(gpu.uuid), bus_id, f"nvidia{gpu.index}", label_value(gpu.name), host, driver)
    labels = dict(zip(DCGM_LABELS, values, strict=True))
    if pod is not None and pod[1]:
        labels.update(zip(POD_LABELS, pod, strict=True))
    return labels


def _family(name: str, kind: str, help_text: str) -> Metric:
    family = Metric(name, help_text, "gauge")
    if kind == "counter":
        family.type = COUNTER
    return family
