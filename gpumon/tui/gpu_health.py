"""A GPU's health under its header: NVLink, ECC, memory repairs, XID errors, the PCIe link, fan and energy (N/A where
the GPU does not report one), and each MIG instance as its own small memory gauge."""

from __future__ import annotations

import time

from rich.text import Text

from gpumon import units
from gpumon.printable import printable
from gpumon.sampling.history import active_throttle_reasons
from gpumon.sampling.snapshot import GpuSample, MigSample, Snapshot
from gpumon.tui.bar import bar

NOT_AVAILABLE = "N/A"
MIG_BAR_WIDTH = 8
MIG_NAME_WIDTH = 10
_GAP = "  "
_ALARM = "bold white on red"
_DIM = "bright_black"

_HEALTH_FIELDS = (
    "fan_speed",
    "pcie_link_gen",
    "pcie_link_width",
    "energy_total",
    "nvlink_rx",
    "nvlink_tx",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "ecc_corrected_aggregate",
    "ecc_uncorrected_aggregate",
    "remapped_rows_correctable",
    "retired_pages",
    "xid_events",
    "mig_mode",
)


def no_gpu_line(snapshot: Snapshot) -> Text | None:
    """Why the snapshot has no GPU figures, one line as the GPU pane shows it ('GPU: NVIDIA driver not loaded');
    None where NVML works."""
    if snapshot.gpu_error:
        message = printable(snapshot.gpu_error)
        if not message.lower().startswith("gpu"):
            message = f"GPU: {message}"
        return Text(message, style="bold yellow")
    if not snapshot.gpus:
        return Text("GPU: no NVIDIA GPU found", style="bold yellow")
    return None


def has_health(gpu: GpuSample) -> bool:
    """Whether the sample carries any health figure (recordings made before them carry none: no line is shown)."""
    return any(getattr(gpu, name) is not None for name in _HEALTH_FIELDS) or bool(gpu.mig_instances)


def _item(label: str, value: str, style: str = "") -> Text:
    text = Text(label + " ", style=_DIM, no_wrap=True, end="")
    text.append(value, style=_DIM if value == NOT_AVAILABLE else style)
    return text


def _nvlink(gpu: GpuSample) -> Text:
    if gpu.nvlink_rx is None and gpu.nvlink_tx is None:
        return _item("NVLink", NOT_AVAILABLE)
    received, sent = (units.link_rate(rate) for rate in (gpu.nvlink_rx, gpu.nvlink_tx))
    return _item("NVLink", f"↓{received} ↑{sent}")


def _ecc(gpu: GpuSample) -> Text:
    """'ECC 3/0 life 41/2': corrected/uncorrected since the driver loaded, and over the GPU's life."""
    volatile = (gpu.ecc_corrected_volatile, gpu.ecc_uncorrected_volatile)
    aggregate = (gpu.ecc_corrected_aggregate, gpu.ecc_uncorrected_aggregate)
    if all(count is None for count in (*volatile, *aggregate)):
        return _item("ECC", NOT_AVAILABLE)
    text = _item(
        "ECC",
        "/".join(units.count(count) for count in volatile),
        _ALARM if (gpu.ecc_uncorrected_volatile or 0) > 0 else "",
    )
    if any(count is not None for count in aggregate):
        text.append(" life ", style=_DIM)
        text.append(
            "/".join(units.count(count) for count in aggregate),
            style="yellow" if (gpu.ecc_uncorrected_aggregate or 0) > 0 else "",
        )
    return text


def _memory_repairs(gpu: GpuSample) -> Text:
    """Remapped rows (correctable/uncorrectable) on Ampere and later, retired pages before."""
    if gpu.remapped_rows_correctable is not None or gpu.remapped_rows_uncorrectable is not None:
        rows = f"{units.count(gpu.remapped_rows_correctable)}/{units.count(gpu.remapped_rows_uncorrectable)}"
        text = _item("remap", rows)
        if gpu.remapped_rows_failed:
            text.append(" FAILED", style=_ALARM)
        elif gpu.remapped_rows_pending:
            text.append(" pending reset", style="yellow")
        return text
    if gpu.retired_pages is not None:
        text = _item("retired", units.count(gpu.retired_pages), "yellow" if gpu.retired_pages else "")
        if gpu.retired_pages_pending:
            text.append(" pending reset", style="yellow")
        return text
    return _item("remap", NOT_AVAILABLE)


def _xid(gpu: GpuSample) -> Text:
    """'XID 79 at 12:03:11 (+2)': the latest XID error and how many came before it."""
    events = gpu.xid_events
    if events is None:
        return _item("XID", NOT_AVAILABLE)
    if not events:
        return _item("XID", "none")
    latest = events[-1]
    when = time.strftime("%H:%M:%S", time.localtime(latest.timestamp))
    earlier = f" (+{len(events) - 1})" if len(events) > 1 else ""
    return _item("XID", f"{latest.xid} at {when}{earlier}", _ALARM)


def _pcie_link(gpu: GpuSample) -> list[Text]:
    """'PCIe Gen5x16'; below what the GPU and slot can do, with that: 'PCIe Gen1x16/5x16' (an idle GPU stepping its
    generation down is normal), in yellow when lanes are missing (a link trained narrow stays so); nothing for
    samples without link figures (recordings made before them)."""
    if gpu.pcie_link_gen is None and gpu.pcie_link_width is None:
        return []
    gen, width = units.count(gpu.pcie_link_gen), units.count(gpu.pcie_link_width)
    link = f"Gen{gen}x{width}"
    gen_max, width_max = gpu.pcie_link_gen_max, gpu.pcie_link_width_max
    below = (gen_max is not None and (gpu.pcie_link_gen or 0) < gen_max) or (
        width_max is not None and (gpu.pcie_link_width or 0) < width_max
    )
    if below:
        link += f"/{units.count(gen_max)}x{units.count(width_max)}"
    narrow = width_max is not None and gpu.pcie_link_width is not None and gpu.pcie_link_width < width_max
    return [_item("PCIe", link, "yellow" if narrow else "")]


def health_text(gpu: GpuSample, width: int) -> Text:
    """One line: 'NVLink ↓1.2GB/s ↑800MB/s  ECC 0/0 life 3/0  remap 0/0  XID none  PCIe Gen5x16  fan N/A  energy
    1.2MJ' (link rates in decimal units, as units.link_rate writes them), as many whole items as fit `width` (a figure
    cut short, 'energy 1', would read as another figure)."""
    energy = f"{units.count(gpu.energy_total)}J" if gpu.energy_total is not None else NOT_AVAILABLE
    fan = units.percent(gpu.fan_speed) if gpu.fan_speed is not None else NOT_AVAILABLE
    parts = [
        _nvlink(gpu),
        _ecc(gpu),
        _memory_repairs(gpu),
        _xid(gpu),
        *_pcie_link(gpu),
        _item("fan", fan),
        _item("energy", energy),
    ]
    text = Text("  ", no_wrap=True, end="")
    for index, part in enumerate(parts):
        if index and text.cell_len + len(_GAP) + part.cell_len > width:
            break
        if index:
            text.append(_GAP)
        text.append_text(part)
    return text


def mig_gauge(instance: MigSample) -> Text:
    """'1g.10gb ██▎····· 23%': one MIG instance's memory in use."""
    profile = instance.name.rsplit("MIG", 1)[-1].strip() or f"MIG {instance.index}"
    text = Text(printable(profile)[:MIG_NAME_WIDTH].ljust(MIG_NAME_WIDTH) + " ", no_wrap=True, end="")
    text.append_text(bar(instance.memory_percent, MIG_BAR_WIDTH, "cyan"))
    text.append(units.percent(instance.memory_percent).rjust(5), style="cyan")
    return text


def mig_lines(gpu: GpuSample, width: int) -> list[Text]:
    """The GPU's MIG instances as small gauges, as many to a line as fit the width."""
    if not gpu.mig_instances:
        return []
    lines: list[Text] = []
    line = Text("  MIG", style="bold", no_wrap=True, end="")
    placed = 0
    for instance in gpu.mig_instances:
        gauge = mig_gauge(instance)
        if placed and line.cell_len + len(_GAP) + gauge.cell_len > width:
            lines.append(line)
            line = Text("     ", no_wrap=True, end="")
            placed = 0
        line.append(_GAP)
        line.append_text(gauge)
        placed += 1
    lines.append(line)
    return lines


DRAWN_FROM = (
    *_HEALTH_FIELDS,
    "remapped_rows_uncorrectable",
    "remapped_rows_pending",
    "remapped_rows_failed",
    "retired_pages_pending",
    "pcie_link_gen_max",
    "pcie_link_width_max",
    "mig_instances",
)
"""Every field of a GpuSample the health lines are drawn from (tests/tui/test_gpu_health.py checks none is missing)."""
_DRAWN_MAX = 64
_drawn: dict[tuple[object, ...], list[Text]] = {}
"""(width, the DRAWN_FROM values) -> the lines: health is read every 10 s, its lines asked for every frame."""


def health_lines(gpu: GpuSample, width: int) -> list[Text]:
    """The health line (cut to the width) and the MIG gauges; nothing for a sample without health figures."""
    key = (width, *(getattr(gpu, name) for name in DRAWN_FROM))
    lines = _drawn.get(key)
    if lines is None:
        if len(_drawn) >= _DRAWN_MAX:
            _drawn.clear()
        lines = _drawn[key] = draw_health_lines(gpu, width)
    return [line.copy() for line in lines]


def draw_health_lines(gpu: GpuSample, width: int) -> list[Text]:
    """`health_lines`, drawn anew."""
    if not has_health(gpu):
        return []
    line = health_text(gpu, width)
    line.truncate(width)  # the first item alone may be wider
    return [line, *mig_lines(gpu, width)]


def _narrow_link(gpu: GpuSample) -> bool:
    width, most = gpu.pcie_link_width, gpu.pcie_link_width_max
    return width is not None and most is not None and width < most


def badge_items(gpu: GpuSample) -> list[Text]:
    """The GPU's health problems, shortest first-glance form each ('XID 79', 'ECC 2', 'remap FAILED', 'PCIe x8/16',
    'thermal'), and its MIG instances ('MIG 3'); empty when all is well."""
    items: list[Text] = []
    if gpu.xid_events:
        more = f"+{len(gpu.xid_events) - 1}" if len(gpu.xid_events) > 1 else ""
        items.append(Text(f"XID {gpu.xid_events[-1].xid}{more}", style=_ALARM))
    if (gpu.ecc_uncorrected_volatile or 0) > 0:
        items.append(Text(f"ECC {units.count(gpu.ecc_uncorrected_volatile)}", style=_ALARM))
    elif (gpu.ecc_uncorrected_aggregate or 0) > 0:
        items.append(Text(f"ECC life {units.count(gpu.ecc_uncorrected_aggregate)}", style="yellow"))
    if gpu.remapped_rows_failed:
        items.append(Text("remap FAILED", style=_ALARM))
    elif gpu.remapped_rows_pending or gpu.retired_pages_pending:
        items.append(Text("reset pending", style="yellow"))
    if _narrow_link(gpu):
        items.append(Text(f"PCIe x{gpu.pcie_link_width}/{gpu.pcie_link_width_max}", style="yellow"))
    if any("thermal" in reason for reason in active_throttle_reasons(gpu)):
        items.append(Text("thermal", style=_ALARM))
    if gpu.mig_mode or gpu.mig_instances:
        items.append(Text(f"MIG {len(gpu.mig_instances)}", style="bold"))
    return items


HEALTH_OK = "health ok"
HEALTH_UNKNOWN = "health N/A"


def health_badge(gpu: GpuSample) -> Text:
    """'XID 79 ECC 2 PCIe x8/16' (each in its alarm colour), or 'health ok' (dim), or 'health N/A' where all else is
    well and the sample has no health figures (recordings made before them)."""
    items = badge_items(gpu)
    if not items:
        return Text(HEALTH_OK if has_health(gpu) else HEALTH_UNKNOWN, style=_DIM, no_wrap=True, end="")
    return Text(" ", no_wrap=True, end="").join(items)


def health_detail_lines(gpu: GpuSample) -> list[Text]:
    """Every health figure of the GPU on its own line, every XID error kept with its time, and the MIG instances."""
    energy = f"{units.count(gpu.energy_total)}J" if gpu.energy_total is not None else NOT_AVAILABLE
    fan = units.percent(gpu.fan_speed) if gpu.fan_speed is not None else NOT_AVAILABLE
    throttle = ", ".join(printable(reason) for reason in active_throttle_reasons(gpu)) or "none"
    items = [
        _xid(gpu),
        _ecc(gpu),
        _memory_repairs(gpu),
        *(_pcie_link(gpu) or [_item("PCIe", NOT_AVAILABLE)]),
        _item("clocks held by", throttle, _ALARM if throttle != "none" else ""),
        _nvlink(gpu),
        _item("fan", fan),
        _item("energy", energy),
        _item("MIG", "on" if gpu.mig_mode else "off" if gpu.mig_mode is not None else NOT_AVAILABLE),
    ]
    lines = [Text.assemble("  ", item) for item in items]
    for event in reversed(gpu.xid_events or ()):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.timestamp))
        lines.append(Text(f"    XID {event.xid} at {when}", style="red"))
    return lines + mig_lines(gpu, 100)
