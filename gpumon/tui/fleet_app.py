"""`gpumon fleet`: the fleet view read from Prometheus: every host and GPU with its state and health, then the jobs.

Prometheus is read by gpumon.fleet's poller on its own thread; each FleetSnapshot reaches the UI as a message.
When Prometheus is lost or answers nothing, the status line says so in one line and the last rows stay shown.
`/` edits the filter (the same terms as --filter), `s` sorts by the next key, `S` reverses; Enter on a row shows
that host's processes (read on a worker thread); Escape goes back.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.driver import Driver
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from gpumon import units
from gpumon.fleet import FleetPoller, FleetSnapshot, HostProcesses, JobRow, PromClient, read_processes
from gpumon.fleet.hosts import STALE_AFTER
from gpumon.fleet.view import SORT_KEYS, FilterError, FleetRow, Term, fleet_rows, parse_filter, select, state_counts
from gpumon.printable import printable
from gpumon.tui._textual_compat import driver_class
from gpumon.tui.fleet_table import header, layout, line
from gpumon.tui.format import plural
from gpumon.tui.heap import freeze_after_first_frame
from gpumon.tui.key_bar import KeyBar
from gpumon.tui.terminal_output import compacting_driver

NO_DATA = "no GPU rows yet"
FILTER_PLACEHOLDER = "/ to filter: host=~node-1.* state!=ok util<20 rack=r7"


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
    #filter { height: 1; border: none; padding: 0 1; }
    #filter.invalid { color: $error; }
    #gpu-header { height: 1; padding: 0; }
    #gpus { height: auto; max-height: 70%; border: none; padding: 0; scrollbar-size-vertical: 1; }
    #gpus > .option-list--option { padding: 0; }
    #jobs-pane { height: 1fr; }
    #jobs { padding: 0 1; margin-top: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("slash", "edit_filter", "Filter", key_display="/"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("S", "reverse_sort", "Reverse", show=False),
    ]

    def get_driver_class(self) -> type[Driver]:
        return compacting_driver(driver_class(super().get_driver_class()))

    def __init__(
        self,
        client: PromClient | None = None,
        interval: float = 5.0,
        *,
        stale_after: float = STALE_AFTER,
        sort: str = "host",
        filter_text: str = "",
    ) -> None:
        super().__init__()
        self.client = client
        self.interval = interval
        self.stale_after = stale_after
        self.sort = sort
        self.filter_text = filter_text
        self.terms: tuple[Term, ...] = parse_filter(filter_text)
        self.filter_error: str | None = None
        self.last_good: FleetSnapshot | None = None
        self.latest: FleetSnapshot | None = None
        self._poller: FleetPoller | None = None
        self._rows: list[FleetRow] = []
        self._shown: list[FleetRow] = []

    def compose(self) -> ComposeResult:
        source = self.client.base_url if self.client is not None else "no Prometheus"
        yield Static(f"reading {printable(source)} …", id="status")
        yield Input(self.filter_text, placeholder=FILTER_PLACEHOLDER, id="filter", compact=True)
        yield Static(NO_DATA, id="gpu-header")
        yield OptionList(id="gpus")
        with VerticalScroll(id="jobs-pane"):
            yield Static("", id="jobs")
        yield KeyBar()

    def on_mount(self) -> None:
        freeze_after_first_frame(self)
        self.query_one("#gpus", OptionList).focus()
        if self.client is not None:
            self._poller = FleetPoller(self.client, self.interval, self._deliver, self.stale_after)
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
        if snapshot.error is None:
            self.last_good = snapshot
        shown = self.last_good if self.last_good is not None else snapshot
        self._rows = fleet_rows(shown)
        self._refresh_rows()
        self.query_one("#jobs", Static).update(job_table(shown.jobs))

    def _refresh_status(self) -> None:
        status = self.query_one("#status", Static)
        snapshot = self.latest
        problem = self.filter_error or (snapshot.error if snapshot is not None else None)
        if problem is not None:
            status.update(Text(printable(problem), no_wrap=True, overflow="ellipsis"))
            status.add_class("error")
            return
        status.remove_class("error")
        if snapshot is None:
            return
        status.update(status_line(snapshot, self._rows, len(self._shown), self.sort))

    def _refresh_rows(self) -> None:
        """Filter and sort the rows, then draw them to the width; the highlighted row stays the same row."""
        table = self.query_one("#gpus", OptionList)
        previous = self._shown[table.highlighted] if table.highlighted is not None and self._shown else None
        self._shown = select(self._rows, self.terms, self.sort)
        width = max(20, self.size.width - 1)  # the table's scrollbar takes one column
        shape = layout(width, max((len(printable(row.host.name)) for row in self._shown), default=4))
        self.query_one("#gpu-header", Static).update(header(shape) if self._rows else Text(NO_DATA))
        table.set_options(Option(line(row, shape), id=str(index)) for index, row in enumerate(self._shown))
        if self._shown:
            keys = [_identity(row) for row in self._shown]
            wanted = _identity(previous) if previous is not None else None
            table.highlighted = keys.index(wanted) if wanted in keys else 0
        self._refresh_status()

    def on_resize(self, event: events.Resize) -> None:
        if self.latest is not None:
            self._refresh_rows()

    def action_edit_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_cycle_sort(self) -> None:
        key = self.sort.removeprefix("-")
        self.sort = SORT_KEYS[(SORT_KEYS.index(key) + 1) % len(SORT_KEYS)]
        self._refresh_rows()

    def action_reverse_sort(self) -> None:
        self.sort = self.sort.removeprefix("-") if self.sort.startswith("-") else "-" + self.sort
        self._refresh_rows()

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        """Each edit applies at once when it parses; a bad one says why on the status line and keeps the last."""
        try:
            self.terms = parse_filter(event.value)
        except FilterError as error:
            self.filter_error = str(error)
            event.input.add_class("invalid")
            self._refresh_status()
            return
        self.filter_text, self.filter_error = event.value, None
        event.input.remove_class("invalid")
        if self.latest is not None:
            self._refresh_rows()

    @on(Input.Submitted, "#filter")
    def filter_done(self) -> None:
        self.query_one("#gpus", OptionList).focus()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.focused is self.query_one("#filter", Input):
            self.query_one("#gpus", OptionList).focus()
            event.stop()

    @on(OptionList.OptionSelected, "#gpus")
    def open_host(self, event: OptionList.OptionSelected) -> None:
        if self.client is None or event.option.id is None:
            return
        host = self._shown[int(event.option.id)].host.name
        self.push_screen(ProcessScreen(self.client, host))


def _identity(row: FleetRow) -> tuple[str, str | None]:
    return (row.host.name, row.gpu.gpu if row.gpu is not None else None)


def status_line(snapshot: FleetSnapshot, rows: list[FleetRow], shown: int, sort: str) -> Text:
    """'08:12:03 · 50 hosts: 2 DOWN, 1 NVML FAILED, 392 GPUs, 3 with problems, 4 jobs · 12 of 400 rows shown · sort
    util': the time first, so that 80 columns cut only the least needed words."""
    hosts = len(snapshot.hosts)
    counts = state_counts(rows)
    failing = ", ".join(f"{counts[state]} {state}" for state in ("DOWN", "NVML FAILED") if counts.get(state))
    troubled = sum(1 for row in rows if row.gpu is not None and row.gpu.problems)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{time.strftime('%H:%M:%S', time.localtime(snapshot.taken))} · {plural(hosts, 'host')}")
    if failing:
        text.append(f": {failing}", style="bold red")
    text.append(f", {plural(len(snapshot.gpus), 'GPU')}")
    if troubled:
        text.append(f", {troubled} with problems", style="yellow")
    text.append(f", {plural(len(snapshot.jobs), 'job')}")
    if shown != len(rows):
        text.append(f" · {shown} of {len(rows)} rows shown")
    text.append(f" · sort {sort}")
    return text


def job_table(jobs: tuple[JobRow, ...]) -> Text:
    """Each job (grouped across hosts by run id): its finding, then a line per rank, the straggler marked."""
    text = Text(no_wrap=True, overflow="ellipsis")
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
