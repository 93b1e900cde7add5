"""The GPU pane: per GPU a compact block of gauges with fixed-scale sparklines, clocks, power and throttling."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.text import Span, Text

from gpumon import units
from gpumon.printable import printable
from gpumon.sampling.history import History
from gpumon.sampling.snapshot import GpuSample, Snapshot
from gpumon.tui.bar import bar, gauge_line
from gpumon.tui.format import short_gpu_name
from gpumon.tui.pane import Pane
from gpumon.tui.sparkline import spark_rows
from gpumon.units import MISSING

LABEL_WIDTH = 7
PERCENT_WIDTH = 4
_DENSITIES = (("full", True), ("full", False), ("pair", True), ("pair", False), ("line", False))
"""From most to least detailed: one gauge per line, two per line, one line per GPU; with or without the extra
gauges a wide pane can show."""
_SEPARATOR = " │ "


@dataclass(frozen=True, slots=True)
class Gauge:
    """One percentage of one GPU: its label, value, history key and colour."""

    label: str
    short_label: str
    value: float | None
    history_key: str
    style: str


WIDE_GAUGES = 90
"""From this pane width, full density also shows memory bandwidth, SM occupancy and DRAM bandwidth."""


def gauges(gpu: GpuSample, *, wide: bool = False) -> list[Gauge]:
    """GPU-Util and memory always; SM and tensor activity only where the GPU has GPM; more when wide."""
    prefix = f"gpu{gpu.index}."
    rows = [
        Gauge("Util", "U", gpu.utilization_gpu, prefix + "utilization_gpu", "green"),
        Gauge("Mem", "M", gpu.memory_percent, prefix + "memory_percent", "cyan"),
    ]
    if gpu.has_gpm:
        rows.append(Gauge("SM act", "SM", gpu.sm_activity, prefix + "sm_activity", "magenta"))
        rows.append(Gauge("Tensor", "T", gpu.tensor_activity, prefix + "tensor_activity", "blue"))
    if wide:
        rows.append(Gauge("Mem bw", "MB", gpu.utilization_memory, prefix + "utilization_memory", "cyan"))
        if gpu.has_gpm:
            rows.append(Gauge("SM occ", "O", gpu.sm_occupancy, prefix + "sm_occupancy", "magenta"))
            rows.append(Gauge("DRAM", "D", gpu.dram_bandwidth, prefix + "dram_bandwidth", "cyan"))
    return rows


def active_throttle_reasons(gpu: GpuSample) -> tuple[str, ...]:
    """The clock-event reasons that hold clocks back: all of them except idle."""
    return tuple(reason for reason in gpu.throttle_reasons or () if "idle" not in reason.lower())


def throttle_text(gpu: GpuSample) -> Text:
    if gpu.throttle_reasons is None:
        return Text("throttle N/A", style="bright_black")
    active = active_throttle_reasons(gpu)
    if active:
        return Text("throttle: " + ", ".join(printable(reason) for reason in active), style="bold white on red")
    if gpu.throttle_reasons:
        return Text("idle", style="bright_black")
    return Text("no throttle", style="bright_black")


def _number(value: float | None, pattern: str, width: int) -> str:
    return (pattern.format(value) if value is not None else MISSING).rjust(width)


def vitals_text(gpu: GpuSample) -> Text:
    """Temperature, power / limit and SM / memory clocks, at fixed widths so lines do not jitter."""
    power = f"{_number(gpu.power, '{:.0f}', 3)}/{_number(gpu.power_limit, '{:.0f}', 3)}W"
    clocks = f"{_number(gpu.clock_sm, '{:d}', 4)}/{_number(gpu.clock_memory, '{:d}', 4)}MHz"
    text = Text(no_wrap=True, end="")
    text.append(_number(gpu.temperature, "{:.0f}", 3) + "°C", style="yellow" if (gpu.temperature or 0) >= 85 else "")
    text.append("  " + power + "  " + clocks)
    return text


def transfer_text(gpu: GpuSample) -> Text:
    """Memory used/total and PCIe rx/tx."""
    memory = f"mem {units.size(gpu.memory_used, compact=True).rjust(5)}/{units.size(gpu.memory_total, compact=True)}"
    rx, tx = (units.rate(rate, compact=True, binary=True).rjust(8) for rate in (gpu.pcie_rx, gpu.pcie_tx))
    return Text(f"{memory}  PCIe ↓{rx} ↑{tx}", end="")


THROTTLE_ROOM = 24
"""Cells kept for the throttle state when deciding whether a GPU's header fits one line."""


JOB_MARK_STYLE = "bold black on magenta"
"""The name of the GPU the attached job computes on."""


def header_lines(gpu: GpuSample, width: int, job: bool = False) -> list[Text]:
    """'GPU0 H100 80GB HBM3' with vitals, transfers and throttling, on one line where it fits, else two.

    The choice ignores how long the throttle reasons happen to be, so the pane does not change height when they do.
    job: the attached job runs on this GPU (its name is highlighted).
    """
    name = Text(f"GPU{gpu.index} {short_gpu_name(gpu.name)}", style=JOB_MARK_STYLE if job else "bold", no_wrap=True,
                end="")
    vitals = vitals_text(gpu)
    transfer = transfer_text(gpu)
    gap = "  "
    one_line_width = name.cell_len + len(gap) + vitals.cell_len + len(gap) + transfer.cell_len + 2
    transfers = Text.assemble(transfer, "  ", throttle_text(gpu))
    if one_line_width + THROTTLE_ROOM <= width:
        return [Text.assemble(name, gap, vitals, gap, transfers)]
    first = Text.assemble(name, gap)
    first.append(" " * max(0, width - first.cell_len - vitals.cell_len))
    first.append_text(vitals)
    return [first, transfers]


def gauge_text(gauge: Gauge, history: History, width: int) -> Text:
    """'Util   ████▌··· 97% ▁▂▃▅▇█': label, bar, percent and a 0-100% sparkline filling the width."""
    return gauge_lines(gauge, history, width)[0]


def gauge_lines(gauge: Gauge, history: History, width: int, graph_rows: int = 1) -> list[Text]:
    """gauge_text with its sparkline `graph_rows` lines tall: the gauge on the first line, the graph below it
    in the same columns (one line where there is no room for a sparkline)."""
    bar_width = max(6, min(25, width // 4))
    spark_width = max(0, width - LABEL_WIDTH - bar_width - PERCENT_WIDTH - 2)
    graph = spark_rows(history.last(gauge.history_key, spark_width), graph_rows, spark_width) if spark_width else [""]
    lines = [gauge_line(gauge.label.ljust(LABEL_WIDTH), gauge.value, bar_width, PERCENT_WIDTH, graph[0], gauge.style)]
    offset = width - spark_width
    for row in graph[1:]:
        lines.append(Text(" " * offset + row, no_wrap=True, end="", spans=[Span(offset, offset + len(row), gauge.style)]))
    return lines


def gpu_block(gpu: GpuSample, history: History, width: int, density: str, extra: bool = False,
              job: bool = False, graph_rows: int = 1) -> list[Text]:
    """The lines of one GPU at a density ('full', 'pair' or 'line'), with the extra gauges if asked and wide;
    at 'full' each sparkline `graph_rows` lines tall."""
    rows = gauges(gpu, wide=extra and width >= WIDE_GAUGES)
    if density == "line":
        return [one_line(gpu, rows, width, job)]
    lines = header_lines(gpu, width, job)
    if density == "full":
        lines.extend(line for gauge in rows for line in gauge_lines(gauge, history, width, graph_rows))
        return lines
    cell_width = (width - len(_SEPARATOR)) // 2
    for left, right in zip(rows[::2], rows[1::2] + [None]):
        line = gauge_text(left, history, cell_width)
        if right is not None:
            line.append(_SEPARATOR, style="bright_black")
            line.append_text(gauge_text(right, history, cell_width))
        lines.append(line)
    return lines


def one_line(gpu: GpuSample, rows: list[Gauge], width: int, job: bool = False) -> Text:
    """'0 H100 80GB HBM3  U ████ 97%  M ██ 71%  SM 62%  T 40%  52°C 312W' for many GPUs in little room.

    The mini bars are dropped where they would not fit the width.
    """
    for bar_width in (5, 0):
        text = Text(f"{gpu.index} ", style=JOB_MARK_STYLE if job else "bold", no_wrap=True, end="")
        text.append(short_gpu_name(gpu.name)[:14].ljust(14), style=JOB_MARK_STYLE if job else "")
        for gauge in rows:
            text.append(f" {gauge.short_label}")
            if bar_width:
                text.append(" ")
                text.append_text(bar(gauge.value, bar_width, gauge.style))
            text.append(units.percent(gauge.value).rjust(PERCENT_WIDTH + 1), style=gauge.style)
        text.append("  " + _number(gpu.temperature, "{:.0f}", 3) + "°C " + _number(gpu.power, "{:.0f}", 3) + "W")
        if active_throttle_reasons(gpu):
            text.append(" throttled", style="bold white on red")
        if text.cell_len <= width:
            break
    return text


def gpu_lines(snapshot: Snapshot, history: History, width: int, max_lines: int,
              job_uuids: frozenset[str] = frozenset(), graph_rows: int = 1) -> list[Text]:
    """The pane's lines: the error line, or every GPU at the most detailed density that fits max_lines.

    job_uuids: the GPUs the attached job computes on, marked.
    graph_rows: sparklines this many lines tall where that fits max_lines (else one line, as without).
    """
    if snapshot.gpu_error:
        message = printable(snapshot.gpu_error)
        if not message.lower().startswith("gpu"):
            message = f"GPU: {message}"
        return [Text(message, style="bold yellow")]
    if not snapshot.gpus:
        return [Text("GPU: no NVIDIA GPU found", style="bold yellow")]
    lines: list[Text] = []
    tall = [("full", True, graph_rows), ("full", False, graph_rows)] if graph_rows > 1 else []
    for density, extra, rows in [*tall, *((density, extra, 1) for density, extra in _DENSITIES)]:
        lines = [line for gpu in snapshot.gpus
                 for line in gpu_block(gpu, history, width, density, extra, gpu.uuid in job_uuids, rows)]
        if len(lines) <= max_lines:
            break
    return lines


class GpuPane(Pane):
    """Per GPU: utilization, memory, SM and tensor activity (where GPM exists) with history, and vitals."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = 6
        """Most lines the pane may take; the app sets it from the terminal height."""
        self.border_title = "GPU"
        self.job_uuids: frozenset[str] = frozenset()
        """UUIDs of the GPUs the attached job computes on (their names are highlighted)."""
        self.graph_rows = 1
        """Lines per sparkline where the pane has the room (the t key cycles 1, 2, 3)."""
        self._shown: tuple[Snapshot, History] | None = None

    def show(self, snapshot: Snapshot, history: History) -> None:
        self._shown = (snapshot, history)
        max_lines = self.max_lines
        job_uuids = self.job_uuids
        graph_rows = self.graph_rows
        title = f"GPU · driver {snapshot.driver_version}" if snapshot.driver_version else "GPU"
        marked = [gpu.index for gpu in snapshot.gpus if gpu.uuid in job_uuids]
        if marked:
            title += " · job on " + ", ".join(f"GPU{index}" for index in marked)
        self.set_title(title)
        self.show_lines(lambda width: gpu_lines(snapshot, history, width, max_lines, job_uuids, graph_rows))

    def set_graph_rows(self, rows: int) -> None:
        """Draw the sparklines `rows` lines tall where they fit; redraws at once."""
        if rows == self.graph_rows:
            return
        self.graph_rows = rows
        if self._shown is not None:
            self.show(*self._shown)

    def mark_job(self, uuids: Iterable[str]) -> None:
        """Highlight the GPUs with these UUIDs (the attached job's); redraws at once when that changes."""
        marked = frozenset(uuids)
        if marked == self.job_uuids:
            return
        self.job_uuids = marked
        if self._shown is not None:
            self.show(*self._shown)
