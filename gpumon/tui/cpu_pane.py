"""The CPU pane: total CPU (history graphs of it and of memory where the pane has the room, else a 0-100%
sparkline), every core in a compact grid, load, iowait, memory and swap."""

from __future__ import annotations

from rich.text import Span, Text

from gpumon import units
from gpumon.sampling.history import History
from gpumon.sampling.snapshot import CpuSample
from gpumon.tui._textual_compat import drawn_text
from gpumon.tui.bar import bar, bar_spans, filled_steps, gauge_line, level_style
from gpumon.tui.format import plural
from gpumon.tui.gauge_graph import (
    GRAPH_OFFSET,
    Gauge,
    GraphCache,
    GraphView,
    allot_rows,
    gauge_graph_lines,
    time_axis_line,
)
from gpumon.tui.glyphs import forget_on_change
from gpumon.tui.graph import MAX_ROWS, GraphStyle
from gpumon.tui.pane import Pane
from gpumon.tui.sparkline import spark_string

LABEL_WIDTH = 7
PERCENT_WIDTH = 4
CORE_BAR_WIDTH = 4
_GROUP = 8
"""Cores per group in the block grid (a space between groups)."""


def total_line(cpu: CpuSample, history: History, width: int) -> Text:
    bar_width = max(6, min(25, width // 4))
    spark_width = max(0, width - LABEL_WIDTH - bar_width - PERCENT_WIDTH - 2)
    spark = spark_string(history.last("cpu.total", spark_width), spark_width)
    return gauge_line("CPU".ljust(LABEL_WIDTH), cpu.total, bar_width, PERCENT_WIDTH, spark, "green")


def labelled_core_lines(per_core: tuple[float, ...], width: int) -> list[Text]:
    """Cores as ' 7 ██▌·' cells, as many per line as fit; a line whose cores read as before (the same bar cells and
    colours: most cores of a training host sit idle from one sample to the next) is handed back as the same Text."""
    digits, per_line = _labelled_layout(len(per_core), width)
    lines = []
    for start in range(0, len(per_core), per_line):
        shown = per_core[start : start + per_line]
        key = (start, digits, tuple((filled_steps(percent, CORE_BAR_WIDTH), level_style(percent)) for percent in shown))
        line = _CORE_LINES.get(key)
        if line is None:
            if len(_CORE_LINES) >= _CORE_LINES_MAX:
                _CORE_LINES.clear()
            line = _CORE_LINES[key] = _labelled_core_line(start, digits, shown)
        lines.append(line)
    return lines


def _labelled_core_line(start: int, digits: int, per_core: tuple[float, ...]) -> Text:
    parts: list[str] = []
    spans: list[Span] = []
    offset = 0
    for index, percent in enumerate(per_core, start):
        label = f"{index:>{digits}} "
        spans.append(Span(offset, offset + len(label), "bright_black"))
        offset += len(label)
        cells, cell_spans = bar_spans(percent, CORE_BAR_WIDTH, level_style(percent), offset)
        spans.extend(cell_spans)
        offset += len(cells) + 1
        parts += (label, cells, " ")
    return drawn_text("".join(parts), spans)


_CORE_LINES: dict[tuple[int, int, tuple[tuple[int | None, str], ...]], Text] = {}
"""Core grid lines drawn, by what they show (as gauge_graph._ROW_TEXTS). Never changed after it is made."""
_CORE_LINES_MAX = 512
forget_on_change(_CORE_LINES.clear)


def _labelled_layout(cores: int, width: int) -> tuple[int, int]:
    """(digits of the largest core index, labelled cells per line)."""
    digits = len(str(cores - 1))
    return digits, max(1, width // (digits + 1 + CORE_BAR_WIDTH + 1))


def block_core_lines(per_core: tuple[float, ...], width: int) -> list[Text]:
    """Cores as one block character each (▁ idle to █ busy), in groups of eight, wrapped to the width."""
    prefix = "cores "
    room = max(1, width - len(prefix))
    groups_per_line = max(1, (room + 1) // (_GROUP + 1))
    per_line = groups_per_line * _GROUP if room >= _GROUP else room
    lines = []
    for start in range(0, len(per_core), per_line):
        characters = [prefix if start == 0 else " " * len(prefix)]
        spans: list[Span] = []
        offset = len(prefix)
        for position, index in enumerate(range(start, min(start + per_line, len(per_core)))):
            if position and position % _GROUP == 0 and room >= _GROUP:
                characters.append(" ")
                offset += 1
            percent = per_core[index]
            characters.append(spark_string((percent,), 1))
            spans.append(Span(offset, offset + 1, level_style(percent)))
            offset += 1
        lines.append(Text("".join(characters), style="bright_black", no_wrap=True, end="", spans=spans))
    return lines


def core_lines(per_core: tuple[float, ...], width: int, max_rows: int) -> list[Text]:
    """Labelled bars when they fit in max_rows lines, else one block per core (64 cores fit one 80-column line)."""
    if not per_core:
        return []
    _, per_line = _labelled_layout(len(per_core), width)
    if -(-len(per_core) // per_line) <= max_rows:
        return labelled_core_lines(per_core, width)
    return block_core_lines(per_core, width)


def summary_parts(cpu: CpuSample, graphed: bool = False) -> list[Text]:
    """'load 5.2 4.8 4.1', 'iowait 3%', 'mem ███··· 45% 230G/503G', 'swap 0B/8.0G'; `graphed`: iowait and the
    memory gauge are on the graphs, so only memory's sizes ('mem 230G/503G')."""
    load = Text("load " + " ".join(f"{value:.1f}" for value in cpu.load), end="")
    iowait = Text("iowait ", end="")
    iowait.append(units.percent(cpu.iowait), style="bold yellow" if (cpu.iowait or 0) >= 10 else "")
    memory = Text("mem ", end="")
    used, total = units.size(cpu.memory_used, compact=True), units.size(cpu.memory_total, compact=True)
    if graphed:
        memory.append(f"{used}/{total}")
    else:
        memory.append_text(bar(cpu.memory_percent, 6, "cyan"))
        memory.append(f" {units.percent(cpu.memory_percent)} {used}/{total}")
    swap_percent = 100.0 * cpu.swap_used / cpu.swap_total if cpu.swap_total else 0.0
    swap = Text("swap ", end="")
    swap.append(
        f"{units.size(cpu.swap_used, compact=True)}/{units.size(cpu.swap_total, compact=True)}",
        style="bold yellow" if swap_percent >= 50 else "",
    )
    return [load, memory, swap] if graphed else [load, iowait, memory, swap]


def wrap_parts(parts: list[Text], width: int, gap: str = "  ") -> list[Text]:
    """Lay parts out left to right, starting a new line where the next part would not fit."""
    lines: list[Text] = []
    for part in parts:
        if lines and lines[-1].cell_len + len(gap) + part.cell_len <= width:
            lines[-1].append(gap)
            lines[-1].append_text(part)
        else:
            lines.append(Text(no_wrap=True, end="").append_text(part))
    return lines


def host_gauges(cpu: CpuSample) -> list[Gauge]:
    """Total CPU (iowait under its label) and memory in use, as graphed."""
    return [
        Gauge("CPU", "C", cpu.total, "cpu.total", "green", details=(("iowait", cpu.iowait),)),
        Gauge("Mem", "M", cpu.memory_percent, "memory.percent", "cyan", primary=False),
    ]


HOST_SAMPLES_PER_DOT = 2
"""The host graphs average two samples into each dot column: beside the GPU graphs they span twice the time and move
half as often, which halves what they cost to draw and send (each move redraws every row they reach)."""
HOST_GRAPH_CAPS = (MAX_ROWS, MAX_ROWS)
"""The CPU and memory graphs' tallest (the only graphs in their column, they may grow past the GPU graphs' caps)."""
MIN_GRAPH_ROWS = 4
"""Graph rows the CPU and memory graphs need between them before they replace the one-line sparkline."""


def cpu_lines(
    cpu: CpuSample,
    history: History,
    width: int,
    max_core_rows: int,
    room: int | None = None,
    view: GraphView | None = None,
) -> list[Text]:
    """The pane's lines at `width`; with `room` (lines the pane may fill) and a `view`, the CPU and memory graphs
    take what the core grid and the summary leave, over a time axis, when MIN_GRAPH_ROWS fit."""
    cores = core_lines(cpu.per_core, width, max_core_rows)
    if view is not None and room is not None and width > GRAPH_OFFSET + 8:
        summary = wrap_parts(summary_parts(cpu, graphed=True), width)
        gauges = host_gauges(cpu)
        rows = allot_rows(room - len(cores) - len(summary) - 1, gauges, HOST_GRAPH_CAPS)
        if rows is not None and sum(rows) >= MIN_GRAPH_ROWS:
            graphs = [
                line
                for gauge, count in zip(gauges, rows, strict=True)
                for line in gauge_graph_lines(gauge, view, width, count)
            ]
            return [*graphs, time_axis_line(view, width), *cores, *summary]
    summary = wrap_parts(summary_parts(cpu), width)
    return [total_line(cpu, history, width), *cores, *summary]


class CpuPane(Pane):
    """Host CPU: total with history, per-core grid, load averages, iowait, memory and swap."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_core_rows = 1
        """Lines the per-core grid may take before it switches to one block per core; set by the app."""
        self.border_title = "CPU"
        self._graphs: GraphCache = {}

    def show(
        self,
        cpu: CpuSample,
        history: History,
        room: int | None = None,
        style: GraphStyle = GraphStyle.BRAILLE,
        scrolled_back: int = 0,
        whole_cells: bool = False,
    ) -> None:
        """Redraw; `room`: the lines the pane may fill (graphs where they fit), `style`, `scrolled_back` (samples) and
        `whole_cells` as the GPU graphs are drawn."""
        max_core_rows = self.max_core_rows
        title = f"CPU · {plural(len(cpu.per_core), 'core')}" if cpu.per_core else "CPU"
        self.set_title(title)
        view = (
            GraphView(history, style, scrolled_back, self._graphs, whole_cells, HOST_SAMPLES_PER_DOT)
            if room is not None
            else None
        )
        self.show_lines(lambda width: cpu_lines(cpu, history, width, max_core_rows, room, view))
