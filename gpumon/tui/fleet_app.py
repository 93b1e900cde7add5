"""`gpumon fleet`: the fleet view read from Prometheus: one row per host and GPU with graphs, then the jobs.

Prometheus is read by gpumon.fleet's poller on its own thread; each FleetSnapshot reaches the UI as a message.
When Prometheus is lost or answers nothing, the status line says so in one line and the last rows stay shown.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Static

from gpumon import units
from gpumon.fleet import FleetPoller, FleetSnapshot, GpuRow, JobRow, PromClient
from gpumon.printable import printable
from gpumon.tui.sparkline import spark_string

GRAPH_WIDTH = 24
"""Cells per graph: the newest samples of the snapshot's history, on the fixed 0-100% scale."""
NO_DATA = "no GPU rows yet"


class FleetUpdate(Message):
    """A new FleetSnapshot from the poller thread."""

    def __init__(self, snapshot: FleetSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FleetApp(App[None]):
    """The fleet view: polls Prometheus every `interval` seconds; without a client, shows what show() is given."""

    TITLE = "gpumon fleet"
    CSS = """
    #status { height: 1; padding: 0 1; }
    #status.error { color: $error; text-style: bold; }
    #gpus, #jobs { padding: 0 1; }
    #jobs { margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def __init__(self, client: PromClient | None = None, interval: float = 5.0) -> None:
        super().__init__()
        self.client = client
        self.interval = interval
        self.last_good: FleetSnapshot | None = None
        self.latest: FleetSnapshot | None = None
        self._poller: FleetPoller | None = None

    def compose(self) -> ComposeResult:
        source = self.client.base_url if self.client is not None else "no Prometheus"
        yield Static(f"reading {printable(source)} …", id="status")
        with VerticalScroll():
            yield Static(NO_DATA, id="gpus")
            yield Static("", id="jobs")
        yield Footer()

    def on_mount(self) -> None:
        if self.client is not None:
            self._poller = FleetPoller(self.client, self.interval, self._deliver)
            self._poller.start()

    def _deliver(self, snapshot: FleetSnapshot) -> None:
        """Called on the poller's thread: post_message is thread-safe and never waits for the UI."""
        self.post_message(FleetUpdate(snapshot))

    def on_unmount(self) -> None:
        if self._poller is not None:
            self._poller.stop(
                join_timeout=0.0
            )  # the daemon thread ends after its current query; never wait on the UI thread

    def on_fleet_update(self, message: FleetUpdate) -> None:
        self.show(message.snapshot)

    def show(self, snapshot: FleetSnapshot) -> None:
        """Show one snapshot: its rows, or its error line over the last good rows."""
        self.latest = snapshot
        status = self.query_one("#status", Static)
        if snapshot.error is not None:
            status.update(Text(printable(snapshot.error)))
            status.add_class("error")
        else:
            self.last_good = snapshot
            status.remove_class("error")
            hosts = len(snapshot.hosts)
            status.update(
                f"{hosts} host{'s' if hosts != 1 else ''}, {len(snapshot.gpus)} GPUs, {len(snapshot.jobs)} jobs"
                f" · {time.strftime('%H:%M:%S', time.localtime(snapshot.taken))}"
            )
        shown = self.last_good if self.last_good is not None else snapshot
        self.query_one("#gpus", Static).update(gpu_table(shown.gpus) if shown.gpus else Text(NO_DATA))
        self.query_one("#jobs", Static).update(job_table(shown.jobs))


def gpu_table(rows: tuple[GpuRow, ...]) -> Text:
    """One line per host and GPU: utilization, SM activity and memory, each a graph and its newest value."""
    width = max((len(printable(row.host)) for row in rows), default=4)
    text = Text()
    text.append(f"{'HOST':<{width}}  GPU  {'UTIL':<{GRAPH_WIDTH + 5}}{'SM':<{GRAPH_WIDTH + 5}}MEMORY\n", style="bold")
    for row in rows:
        memory_share = (
            row.memory_used / row.memory_total * 100 if row.memory_used is not None and row.memory_total else None
        )
        text.append(f"{printable(row.host):<{width}}  {printable(row.gpu):>3}  ")
        _graph(text, row.utilization_history, row.utilization, "green")
        _graph(text, row.sm_history, row.sm_active, "cyan")
        _graph(text, row.memory_history, memory_share, "magenta")
        text.append(f"{units.size(row.memory_used)} / {units.size(row.memory_total)}\n")
    return text


def _graph(text: Text, history: tuple[float | None, ...], newest: float | None, style: str) -> None:
    text.append(spark_string(history or (newest,), GRAPH_WIDTH), style=style)
    text.append(f" {units.percent(newest):>4}")


def job_table(jobs: tuple[JobRow, ...]) -> Text:
    """Each job (grouped across hosts by run id): its finding, then a line per rank, the straggler marked."""
    text = Text()
    if not jobs:
        text.append("no hooked jobs reported", style="dim")
        return text
    text.append("JOBS\n", style="bold")
    for job in jobs:
        hosts = sorted({rank.host for rank in job.ranks})
        text.append(f"{printable(job.run_id)}  {printable(job.command)}  ", style="bold")
        text.append(f"{len(job.ranks)} ranks on {len(hosts)} host{'s' if len(hosts) != 1 else ''}")
        if job.finding is not None:
            text.append(f"  finding: {printable(job.finding)}", style="yellow")
            if job.confidence is not None:
                text.append(f" ({units.share(job.confidence)} confidence)")
        text.append("\n")
        for index, rank in enumerate(job.ranks):
            label = "?" if rank.rank is None else str(rank.rank)
            straggler = index == job.straggler
            line = (
                f"  rank {label:>3}  {printable(rank.host)} pid {printable(rank.pid)}"
                f"  step {units.milliseconds(rank.step_ms)}  data wait {units.percent(rank.data_wait)}"
            )
            text.append(line, style="bold red" if straggler else "")
            text.append("  ← straggler\n" if straggler else "\n", style="bold red" if straggler else "")
    return text
