"""The GPU pane: per GPU a header of vitals and history graphs of its gauges (0-100%, braille or blocks) that fill
the pane, over a time axis with event marks; where many GPUs must fit, a summary line with the health badge over
graphs side by side, or the summary alone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from rich.text import Span, Text
from textual import events
from textual.message import Message

from gpumon import units
from gpumon.printable import printable
from gpumon.sampling.history import History, active_throttle_reasons
from gpumon.sampling.snapshot import GpuSample, Snapshot
from gpumon.tui._textual_compat import drawn_text
from gpumon.tui.bar import bar
from gpumon.tui.format import short_gpu_name
from gpumon.tui.gauge_graph import (
    GRAPH_OFFSET,
    GROWN_CAPS,
    PERCENT_WIDTH,
    USUAL_CAPS,
    Gauge,
    GraphCache,
    GraphView,
    allot_rows,
    gauge_graph_lines,
    time_axis_line,
)
from gpumon.tui.glyphs import pick
from gpumon.tui.gpu_health import badge_items, health_badge, health_lines
from gpumon.tui.graph import MAX_ROWS, GraphStyle, graph_spans, seconds_per_sample
from gpumon.tui.pane import Pane
from gpumon.units import MISSING

_COMPACT_SEPARATOR = "  "


def gauges(gpu: GpuSample) -> list[Gauge]:
    """GPU-Util and memory always; SM and tensor activity only where the GPU has GPM. Memory bandwidth, SM occupancy
    and DRAM bandwidth go under the label of the gauge they explain."""
    prefix = f"gpu{gpu.index}."
    memory_details: tuple[tuple[str, float | None], ...] = (("Mem bw", gpu.utilization_memory),)
    if gpu.has_gpm:
        memory_details += (("DRAM", gpu.dram_bandwidth),)
    rows = [
        Gauge("Util", "U", gpu.utilization_gpu, prefix + "utilization_gpu", "green"),
        Gauge("Mem", "M", gpu.memory_percent, prefix + "memory_percent", "cyan", details=memory_details),
    ]
    if gpu.has_gpm:
        rows.append(
            Gauge(
                "SM act",
                "SM",
                gpu.sm_activity,
                prefix + "sm_activity",
                "magenta",
                primary=False,
                details=(("SM occ", gpu.sm_occupancy),),
            )
        )
        rows.append(Gauge("Tensor", "T", gpu.tensor_activity, prefix + "tensor_activity", "blue", primary=False))
    return rows


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
    """Memory used/total and PCIe rx/tx (decimal, as NVLink's: 'PCIe ↓67.5MB/s ↑12.5MB/s')."""
    memory = f"mem {units.size(gpu.memory_used, compact=True).rjust(5)}/{units.size(gpu.memory_total, compact=True)}"
    rx, tx = (units.link_rate(rate).rjust(8) for rate in (gpu.pcie_rx, gpu.pcie_tx))
    return drawn_text(f"{memory}  PCIe ↓{rx} ↑{tx}")


THROTTLE_ROOM = 24
"""Cells kept for the throttle state when deciding whether a GPU's header fits one line."""


JOB_MARK_STYLE = "bold black on magenta"
"""The name of the GPU the attached job computes on."""


def header_lines(gpu: GpuSample, width: int, job: bool = False) -> list[Text]:
    """'GPU0 H100 80GB HBM3' with vitals, transfers and throttling, on one line where it fits, else two.

    The choice ignores how long the throttle reasons happen to be, so the pane does not change height when they do.
    job: the attached job runs on this GPU (its name is highlighted).
    """
    name = Text(
        f"GPU{gpu.index} {short_gpu_name(gpu.name)}", style=JOB_MARK_STYLE if job else "bold", no_wrap=True, end=""
    )
    vitals = vitals_text(gpu)
    transfer = transfer_text(gpu)
    gap = "  "
    one_line_width = name.cell_len + len(gap) + vitals.cell_len + len(gap) + transfer.cell_len + 2
    transfers = Text.assemble(transfer, "  ", throttle_text(gpu))
    problems = badge_items(gpu)
    if problems:
        transfers.append("  ")
        transfers.append_text(Text(" ", end="").join(problems))
    if one_line_width + THROTTLE_ROOM <= width:
        return [Text.assemble(name, gap, vitals, gap, transfers)]
    first = Text.assemble(name, gap)
    first.append(" " * max(0, width - first.cell_len - vitals.cell_len))
    first.append_text(vitals)
    return [first, transfers]


def axis_line(gpu: GpuSample, view: GraphView, width: int) -> Text:
    """The time axis under a GPU's graphs, with its events (processes starting and ending, throttling, XID errors)
    marked."""
    return time_axis_line(view, width, f"gpu{gpu.index}.events")


def head_lines(gpu: GpuSample, width: int, job: bool) -> list[Text]:
    """A GPU's header and health lines, above its graphs."""
    return header_lines(gpu, width, job) + health_lines(gpu, width)


def graph_block(
    gpu: GpuSample, view: GraphView, width: int, rows: list[int], axis: bool, head: list[Text]
) -> list[Text]:
    """A GPU's `head` (see head_lines), its gauges' graphs `rows` tall and, if asked, the time axis under them."""
    lines = list(head)
    for gauge, gauge_rows in zip(gauges(gpu), rows, strict=True):
        lines.extend(gauge_graph_lines(gauge, view, width, gauge_rows))
    if axis:
        lines.append(axis_line(gpu, view, width))
    return lines


def compact_lines(
    gpu: GpuSample, view: GraphView, width: int, job: bool = False, rows: int = 1
) -> tuple[list[Text], int]:
    """The one-line summary over graphs `rows` tall of every gauge side by side ('U ⣿⣿⣿  M ⣀⣀⣀ …', the label on the
    top row, an axis line under it); and the graphs' width (0 where they do not fit and only the summary is shown)."""
    gauges_ = gauges(gpu)
    labels = [f"{gauge.short_label} " for gauge in gauges_]
    room = width - 2 - sum(len(label) for label in labels) - len(_COMPACT_SEPARATOR) * (len(gauges_) - 1)
    graph_width = room // len(gauges_)
    if graph_width < 4:
        return [one_line(gpu, gauges_, width, job)], 0
    rows = max(1, min(MAX_ROWS, rows))
    plains = ["  "] * rows
    spans: list[list[Span]] = [[] for _ in range(rows)]
    for index, (gauge, label) in enumerate(zip(gauges_, labels, strict=True)):
        cells, empty = view.graph_lines(gauge.history_key, rows, graph_width)
        for row in range(rows):
            if index:
                plains[row] += _COMPACT_SEPARATOR
            if row:
                spans[row].append(Span(len(plains[row]), len(plains[row]) + len(label), "bright_black"))
            plains[row] += label if row == 0 else pick("│", "|").rjust(len(label) - 1) + " "
            spans[row].extend(graph_spans(cells[row], len(plains[row]), empty, gauge.style))
            plains[row] += cells[row]
    graphs = [drawn_text(plain, row_spans) for plain, row_spans in zip(plains, spans, strict=True)]
    return [one_line(gpu, gauges_, width, job), *graphs], graph_width


def one_line(gpu: GpuSample, rows: list[Gauge], width: int, job: bool = False) -> Text:
    """'0 H100 80GB HBM3  U ████ 97%  M ██ 71%  SM 62%  T 40%  52°C 312W  health ok' for many GPUs in little room.

    The health badge always stays: the mini bars, then the temperature and power, then the name are dropped where
    they would not fit the width, and at the last the badge goes first, before the percentages.
    """
    badge = health_badge(gpu)
    throttled = bool(active_throttle_reasons(gpu))
    style = JOB_MARK_STYLE if job else "bold"
    for bar_width, vitals, name_width in ((5, True, 14), (0, True, 14), (0, False, 14), (0, False, 0)):
        text = Text(f"{gpu.index} ", style=style, no_wrap=True, end="")
        if name_width:
            text.append(short_gpu_name(gpu.name)[:name_width].ljust(name_width), style=JOB_MARK_STYLE if job else "")
        text.append_text(_gauge_figures(rows, bar_width))
        if vitals:
            text.append("  " + _number(gpu.temperature, "{:.0f}", 3) + "°C " + _number(gpu.power, "{:.0f}", 3) + "W")
        if throttled:
            text.append(" throttled", style="bold white on red")
        text.append("  ")
        text.append_text(badge)
        if text.cell_len <= width:
            return text
    return Text.assemble(Text(f"{gpu.index} ", style=style), badge, _gauge_figures(rows, 0), no_wrap=True, end="")


def _gauge_figures(rows: list[Gauge], bar_width: int) -> Text:
    """' U ████ 97% M ██ 71%…': each gauge's short label, a mini bar `bar_width` wide (none at 0) and its figure."""
    text = Text(no_wrap=True, end="")
    for gauge in rows:
        text.append(f" {gauge.short_label}")
        if bar_width:
            text.append(" ")
            text.append_text(bar(gauge.value, bar_width, gauge.style))
        text.append(units.percent(gauge.value).rjust(PERCENT_WIDTH + 1), style=gauge.style)
    return text


def gpu_lines(
    snapshot: Snapshot,
    history: History,
    width: int,
    max_lines: int,
    job_uuids: frozenset[str] = frozenset(),
    view: GraphView | None = None,
) -> list[Text]:
    """The pane's lines: the error line, or every GPU at the most detailed layout that fits max_lines: graphs as tall
    as fit with a time axis, one-row graphs without it, two lines per GPU, one line per GPU.

    job_uuids: the GPUs the attached job computes on, marked.
    """
    return layout(snapshot, history, width, max_lines, job_uuids, view).lines


class Layout(NamedTuple):
    """gpu_lines, and how wide their graphs are where no time axis says what they span (0: an axis does, or none)."""

    lines: list[Text]
    unlabelled_graph_cells: int = 0


def layout(
    snapshot: Snapshot,
    history: History,
    width: int,
    max_lines: int,
    job_uuids: frozenset[str] = frozenset(),
    view: GraphView | None = None,
    fill: bool = False,
) -> Layout:
    """See gpu_lines; `fill`: use every one of max_lines (the GPUs' graphs grow past their usual caps, and lines
    that do not divide evenly go to the first GPUs), where nothing else needs them."""
    if snapshot.gpu_error:
        message = printable(snapshot.gpu_error)
        if not message.lower().startswith("gpu"):
            message = f"GPU: {message}"
        return Layout([Text(message, style="bold yellow")])
    if not snapshot.gpus:
        return Layout([Text("GPU: no NVIDIA GPU found", style="bold yellow")])
    view = view if view is not None else GraphView(history)
    gpus = snapshot.gpus
    budgets = [max_lines // len(gpus) + (fill and index < max_lines % len(gpus)) for index in range(len(gpus))]
    heads = [head_lines(gpu, width, gpu.uuid in job_uuids) for gpu in gpus]
    caps = GROWN_CAPS if fill else USUAL_CAPS
    if width > GRAPH_OFFSET + 8:
        for axis in (True, False):
            allotted = [
                allot_rows(budget - len(head) - axis, gauges(gpu), caps)
                for gpu, head, budget in zip(gpus, heads, budgets, strict=True)
            ]
            if all(rows is not None for rows in allotted) and (axis or all(max(rows or [1]) == 1 for rows in allotted)):
                lines = [
                    line
                    for gpu, rows, head in zip(gpus, allotted, heads, strict=True)
                    for line in graph_block(gpu, view, width, rows or [], axis, head)
                ]
                return Layout(lines, 0 if axis else width - GRAPH_OFFSET)
    if 2 * len(gpus) <= max_lines:
        blocks = [
            compact_lines(gpu, view, width, gpu.uuid in job_uuids, budget - 1)
            for gpu, budget in zip(gpus, budgets, strict=True)
        ]
        lines = [line for block, _ in blocks for line in block]
        return Layout(lines, min(cells for _, cells in blocks))
    return Layout([one_line(gpu, gauges(gpu), width, gpu.uuid in job_uuids) for gpu in gpus])


class GpuPane(Pane):
    """Per GPU: utilization, memory, SM and tensor activity (where GPM exists) as history graphs, and vitals.

    While the dashboard is paused, the graphs can be scrolled back through the history (`scroll`).
    """

    class Resized(Message):
        """The pane's size changed (the CPU pane beside it fills down to its bottom)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = 6
        """Most lines the pane may take; the app sets it from the terminal height."""
        self.fill = False
        """Use every one of max_lines (nothing below needs them); the app sets it."""
        self.border_title = "GPU"
        self.job_uuids: frozenset[str] = frozenset()
        """UUIDs of the GPUs the attached job computes on (their names are highlighted)."""
        self.graph_style = GraphStyle.BRAILLE
        self.scrolled_back = 0
        """Samples the graphs are scrolled back from the newest (only while paused)."""
        self.whole_cells = False
        """Braille graphs move on a whole cell at a time; the app sets it from the sampling interval."""
        self._graphs: GraphCache = {}
        self._shown: tuple[Snapshot, History] | None = None

    def show(self, snapshot: Snapshot, history: History) -> None:
        self._shown = (snapshot, history)
        max_lines, fill = self.max_lines, self.fill
        job_uuids = self.job_uuids
        view = GraphView(history, self.graph_style, self.scrolled_back, self._graphs, self.whole_cells)
        unlabelled = [0]

        def build(width: int) -> list[Text]:
            lines, unlabelled[0] = layout(snapshot, history, width, max_lines, job_uuids, view, fill)
            return lines

        self.show_lines(build)
        self.set_title(self._title(snapshot, view, unlabelled[0]))

    def on_resize(self, event: events.Resize) -> None:
        # Lines and title again at the new width: what the title says of the graphs (their span, how far back
        # they are scrolled) depends on it, and a paused dashboard gets no new snapshot to redraw it.
        self.redraw()
        self.post_message(self.Resized())

    def _title(self, snapshot: Snapshot, view: GraphView, unlabelled_graph_cells: int) -> str:
        """'GPU · driver 580.95 · job on GPU0', with how far the graphs are scrolled back, and what they span where
        no time axis says it."""
        title = f"GPU · driver {snapshot.driver_version}" if snapshot.driver_version else "GPU"
        marked = [gpu.index for gpu in snapshot.gpus if gpu.uuid in self.job_uuids]
        if marked:
            title += " · job on " + ", ".join(f"GPU{index}" for index in marked)
        per_sample = seconds_per_sample(view.history, skip=view.skip) if snapshot.gpus else None
        if per_sample is None:
            return title
        if self.scrolled_back:
            title += f" · ◀ {units.seconds(self.scrolled_back * per_sample)} back (← →, End)"
        if unlabelled_graph_cells:
            span = unlabelled_graph_cells * self.graph_style.samples_per_cell * per_sample
            title += f" · graphs: last {units.seconds(span)}"
        return title

    def graph_samples(self) -> int:
        """Samples across a full-width graph."""
        return max(1, self.size.width - GRAPH_OFFSET) * self.graph_style.samples_per_cell

    def redraw(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def set_graph_style(self, style: GraphStyle) -> None:
        """Draw the graphs in braille or blocks; redraws at once."""
        if style is not self.graph_style:
            self.graph_style = style
            self.redraw()

    def scroll_graphs(self, samples: int) -> None:
        """Move the graphs back (positive) or forward through the history, by samples; 0 returns to the newest."""
        shown = self._shown
        if shown is None:
            return
        history = shown[1]
        oldest = max(0, len(history) - self.graph_samples() // 2)
        back = 0 if samples == 0 else max(0, min(oldest, self.scrolled_back + samples))
        if back != self.scrolled_back:
            self.scrolled_back = back
            self.redraw()

    def mark_job(self, uuids: Iterable[str]) -> None:
        """Highlight the GPUs with these UUIDs (the attached job's); redraws at once when that changes."""
        marked = frozenset(uuids)
        if marked == self.job_uuids:
            return
        self.job_uuids = marked
        self.redraw()
