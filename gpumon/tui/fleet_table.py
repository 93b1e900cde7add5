"""The fleet view's table: columns chosen by priority to fit the width (80 columns included), one line per row.

Always: host, GPU, state and health; then, as room allows, utilization, memory share, the utilization graph, SM
activity, memory used/total, the memory and SM graphs. Graphs shrink before a column is dropped; a row never wraps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from rich.text import Text

from gpumon import units
from gpumon.fleet.health import ALERT
from gpumon.fleet.view import FleetRow
from gpumon.printable import printable
from gpumon.tui.sparkline import spark_string

GRAPH_WIDTHS = (24, 16, 12, 8)
"""Cells per graph, widest first: the newest samples of the snapshot's history, on the fixed 0-100% scale."""
STATE_WIDTH = 11
"""'NVML FAILED'."""
MIN_HEALTH = 16
"""Cells the health words keep at 80 columns; a fifth of a wider line."""
MIN_HOST = 10
VALUE = 5
"""' 100%'."""
MEMORY_TEXT = 22
"""' 80.0 GiB / 80.0 GiB' with its padding."""
GAP = "  "
_ALARM = "bold white on red"
STATE_STYLES = {
    "DOWN": _ALARM,
    "NVML FAILED": _ALARM,
    "OFF BUS": _ALARM,
    "ALERT": _ALARM,
    "WARN": "bold yellow",
    "NO GPUS": "yellow",
    "OK": "green",
}


OPTIONAL = ("util", "memory_share", "util_graph", "sm", "memory_text", "memory_graph", "sm_graph")
"""The optional columns, the most wanted first."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Which columns a line has, and how wide."""

    width: int
    host: int
    graph: int = 0
    util: bool = False
    memory_share: bool = False
    util_graph: bool = False
    sm: bool = False
    memory_text: bool = False
    memory_graph: bool = False
    sm_graph: bool = False

    @property
    def health_wanted(self) -> int:
        return max(MIN_HEALTH, self.width // 5)

    @property
    def health(self) -> int:
        """What is left for the health words."""
        return max(0, self.width - self._fixed())

    def _fixed(self) -> int:
        used = self.host + len(GAP) + 3 + len(GAP) + STATE_WIDTH
        used += VALUE * (self.util + self.memory_share + self.sm)
        used += (self.graph + 1) * (self.util_graph + self.memory_graph + self.sm_graph)
        used += MEMORY_TEXT if self.memory_text else 0
        return used + len(GAP)


def layout(width: int, longest_host: int) -> Layout:
    """The most wanted columns (then the widest graphs) whose line fits `width` with room for the health words."""
    host = min(max(longest_host, 4), max(MIN_HOST, width // 5))
    candidates = []
    for graph in GRAPH_WIDTHS:
        chosen = Layout(width, host, graph)
        for name in OPTIONAL:
            candidate = replace(chosen, **{name: True})
            if candidate.health >= candidate.health_wanted:
                chosen = candidate
        candidates.append(chosen)
    return max(candidates, key=lambda shape: (tuple(getattr(shape, name) for name in OPTIONAL), shape.graph))


def header(shape: Layout) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis", style="bold")
    text.append(f"{'HOST':<{shape.host}}{GAP}GPU{GAP}{'STATE':<{STATE_WIDTH}}")
    blocks = (
        ("UTIL", shape.util, shape.util_graph),
        ("SM", shape.sm, shape.sm_graph),
        ("MEM", shape.memory_share, shape.memory_graph),
    )
    for name, shown, graphed in blocks:
        cells = (shape.graph + 1) * graphed + VALUE * shown
        if cells:
            text.append(f" {name:<{cells - 1}}")
    if shape.memory_text:
        text.append(f" {'MEMORY':<{MEMORY_TEXT - 1}}")
    text.append(f"{GAP}HEALTH")
    text.truncate(shape.width)
    return text


def line(row: FleetRow, shape: Layout) -> Text:
    """One row: its GPU's figures and health, or its host's state and why."""
    text = Text(no_wrap=True, overflow="ellipsis")
    state = row.state
    gpu = row.gpu.gpu if row.gpu is not None else "-"
    text.append(f"{_cut(printable(row.host.name), shape.host):<{shape.host}}{GAP}{_cut(printable(gpu), 3):>3}{GAP}")
    text.append(f"{state:<{STATE_WIDTH}}", style=STATE_STYLES.get(state, ""))
    if row.gpu is None:
        text.append(GAP)
        text.append(host_detail(row), style="red" if state != "NO GPUS" else "dim")
        text.truncate(shape.width)
        return text
    gpu_row = row.gpu
    if shape.util or shape.util_graph:
        _figure(text, shape.util_graph, shape.util, gpu_row.utilization_history, gpu_row.utilization, shape, "green")
    if shape.sm or shape.sm_graph:
        _figure(text, shape.sm_graph, shape.sm, gpu_row.sm_history, gpu_row.sm_active, shape, "cyan")
    if shape.memory_share or shape.memory_graph:
        share = row.memory_share
        _figure(text, shape.memory_graph, shape.memory_share, gpu_row.memory_history, share, shape, "magenta")
    if shape.memory_text:
        text.append(f" {units.size(gpu_row.memory_used):>9} / {units.size(gpu_row.memory_total):<9}")
    text.append(GAP)
    if gpu_row.problems:
        for index, problem in enumerate(gpu_row.problems):
            if index:
                text.append(", ")
            text.append(printable(problem.text), style="bold red" if problem.severity >= ALERT else "yellow")
    else:
        text.append("ok", style="dim")
    text.truncate(shape.width)
    return text


def _figure(
    text: Text,
    graphed: bool,
    shown: bool,
    history: tuple[float | None, ...],
    newest: float | None,
    shape: Layout,
    style: str,
) -> None:
    if graphed:
        text.append(" ")
        text.append(spark_string(history or (newest,), shape.graph), style=style)
    if shown:
        text.append(f" {units.percent(newest):>4}")


def host_detail(row: FleetRow) -> str:
    """'since 08:12:03: scrape failing', the NVML error, or why a host has no GPU rows."""
    host = row.host
    if row.state == "NO GPUS":
        return "the exporter reports no GPUs"
    when = f"no sample since {_when(host.since)}: " if host.since is not None else "no recent sample: "
    detail = printable(host.detail or "")
    return when + detail if row.state == "DOWN" else detail


def _when(stamp: float) -> str:
    """Clock time today, else the date and time."""
    fmt = "%H:%M:%S" if time.time() - stamp < 20 * 3600 else "%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(stamp))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
