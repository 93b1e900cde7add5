"""`gpumon fleet`: the fleet view read from Prometheus: one row per host and GPU with graphs, then the jobs.

Prometheus is read by gpumon.fleet's poller on its own thread; each FleetSnapshot reaches the UI as a message.
When Prometheus is lost or answers nothing, the status line says so in one line and the last rows stay shown.
Enter on a GPU row shows that host's processes (read on a worker thread); Escape goes back.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.driver import Driver
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from gpumon import units
from gpumon.fleet import FleetPoller, FleetSnapshot, GpuRow, HostProcesses, JobRow, PromClient, read_processes
from gpumon.printable import printable
from gpumon.tui._textual_compat import driver_class
from gpumon.tui.format import plural
from gpumon.tui.heap import freeze_after_first_frame
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
    #gpu-header { padding: 0 1; text-style: bold; }
    #gpus { height: auto; max-height: 60%; border: none; padding: 0; }
    #jobs { padding: 0 1; margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def get_driver_class(self) -> type[Driver]:
        return driver_class(super().get_driver_class())

    def __init__(self, client: PromClient | None = None, interval: float = 5.0) -> None:
        super().__init__()
        self.client = client
        self.interval = interval
        self.last_good: FleetSnapshot | None = None
        self.latest: FleetSnapshot | None = None
        self._poller: FleetPoller | None = None
        self._rows: tuple[GpuRow, ...] = ()

    def compose(self) -> ComposeResult:
        source = self.client.base_url if self.client is not None else "no Prometheus"
        yield Static(f"reading {printable(source)} …", id="status")
        yield Static(NO_DATA, id="gpu-header")
        yield OptionList(id="gpus")
        with VerticalScroll():
            yield Static("", id="jobs")
        yield Footer()

    def on_mount(self) -> None:
        freeze_after_first_frame(self)
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
                f"{plural(hosts, 'host')}, {plural(len(snapshot.gpus), 'GPU')}, {plural(len(snapshot.jobs), 'job')}"
                f" · {time.strftime('%H:%M:%S', time.localtime(snapshot.taken))}"
            )
        shown = self.last_good if self.last_good is not None else snapshot
        if shown is not snapshot and snapshot.error is not None and self.last_good is not None:
            return  # the last good rows stay as they are
        self._show_gpus(shown.gpus)
        self.query_one("#jobs", Static).update(job_table(shown.jobs))

    def _show_gpus(self, rows: tuple[GpuRow, ...]) -> None:
        header = self.query_one("#gpu-header", Static)
        table = self.query_one("#gpus", OptionList)
        width = host_width(rows)
        header.update(gpu_header(width) if rows else Text(NO_DATA))
        highlighted = table.highlighted
        table.set_options(Option(gpu_line(row, width), id=str(index)) for index, row in enumerate(rows))
        self._rows = rows
        if rows:
            table.highlighted = min(highlighted or 0, len(rows) - 1)

    @on(OptionList.OptionSelected, "#gpus")
    def open_host(self, event: OptionList.OptionSelected) -> None:
        if self.client is None or event.option.id is None:
            return
        host = self._rows[int(event.option.id)].host
        self.push_screen(ProcessScreen(self.client, host))


def host_width(rows: tuple[GpuRow, ...]) -> int:
    return max((len(printable(row.host)) for row in rows), default=4)


def gpu_header(width: int) -> Text:
    return Text(f"{'HOST':<{width}}  GPU  {'UTIL':<{GRAPH_WIDTH + 5}}{'SM':<{GRAPH_WIDTH + 5}}MEMORY")


def gpu_line(row: GpuRow, width: int) -> Text:
    """One host and GPU: utilization, SM activity and memory, each a graph and its newest value."""
    text = Text()
    memory_share = (
        row.memory_used / row.memory_total * 100 if row.memory_used is not None and row.memory_total else None
    )
    text.append(f"{printable(row.host):<{width}}  {printable(row.gpu):>3}  ")
    _graph(text, row.utilization_history, row.utilization, "green")
    _graph(text, row.sm_history, row.sm_active, "cyan")
    _graph(text, row.memory_history, memory_share, "magenta")
    text.append(f"  {units.size(row.memory_used)} / {units.size(row.memory_total)}")
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
        text.append(f"{plural(len(job.ranks), 'rank')} on {plural(len(hosts), 'host')}")
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


class ProcessScreen(ModalScreen[None]):
    """One host's GPU processes from its exporter's gpumon_process_* series; read off the UI thread."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q", "dismiss", "Back")]
    DEFAULT_CSS = """
    ProcessScreen { align: center middle; }
    ProcessScreen > VerticalScroll { width: 90%; height: 80%; border: round $accent; padding: 0 1; }
    """

    def __init__(self, client: PromClient, host: str) -> None:
        super().__init__()
        self.client = client
        self.host = host
        self.answer: HostProcesses | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(f"reading the processes of {printable(self.host)} …", id="processes")

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True)
    def _load(self) -> HostProcesses:
        return read_processes(self.client, self.host)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The answer reaches the UI thread as the worker's result; a dismissed screen never sees it."""
        if event.state is WorkerState.SUCCESS and isinstance(event.worker.result, HostProcesses):
            self.answer = event.worker.result
            self.query_one("#processes", Static).update(process_table(self.answer))


def process_table(answer: HostProcesses) -> Text:
    """The host's processes, the biggest GPU memory first; or the one line saying why there are none."""
    text = Text(f"{printable(answer.host)}: processes (Escape to go back)\n", style="bold")
    if answer.error is not None:
        text.append(printable(answer.error), style="bold red")
        return text
    text.append(f"{'PID':>8}  GPU  {'GPU MEM':>10}  {'SM':>5}  {'CPU':>6}  {'RSS':>10}  COMMAND\n", style="bold")
    for row in answer.rows:
        cpu = f"{row.cpu:.2f}" if row.cpu is not None else units.MISSING
        text.append(
            f"{printable(row.pid):>8}  {printable(row.gpu):>3}  {units.size(row.gpu_memory):>10}"
            f"  {units.percent(row.sm):>5}  {cpu:>6}  {units.size(row.rss):>10}  {printable(row.command)}\n"
        )
    return text
