"""The gpumon Textual app: thin views over snapshots that a SnapshotSource posts from its own thread, and over the
attached training job (if any), whose client posts from its own thread too."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from textual import events, on
from textual.actions import ActionParseResult
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.dom import DOMNode
from textual.driver import Driver
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input

from gpumon.config import save_setting
from gpumon.printable import printable
from gpumon.sampling.snapshot import Snapshot
from gpumon.sampling.source import SnapshotSource
from gpumon.tui import keys
from gpumon.tui._textual_compat import driver_class
from gpumon.tui.cached_widgets import CachedContainer, CachedScreen, CachedVertical
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.extension import AdvisorElsewhere, Extension
from gpumon.tui.filter_input import FilterInput
from gpumon.tui.first_frame import report_after_first_frame
from gpumon.tui.glyphs import use_ascii
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.graph import WHOLE_CELLS_UP_TO_S, GraphStyle
from gpumon.tui.heap import freeze_after_first_frame
from gpumon.tui.key_bar import KeyBar
from gpumon.tui.machine_line import MachineLine
from gpumon.tui.process_actions import ProcessControl
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.terminal_output import compacting_driver
from gpumon.tui.title_bar import TitleBar
from gpumon.tui.view_options import ViewOptions

if TYPE_CHECKING:
    # What the first frame does not need is imported where it is used (start-up CPU): the job layer's client, the
    # job pane and the advisor it draws on, the picker, help, the profiler capture, the palette.
    from textual.command import Provider

    from gpumon.jobs.job_info import JobGroup
    from gpumon.jobs.source import JobSource
    from gpumon.tui.job_pane import JobPane
    from gpumon.tui.profile_screen import ProfileCapture

WIDE = 140
"""From this many columns the GPU pane sits beside the CPU and disk panes."""
GPU_SHARE = 0.62
"""Wide, the GPU pane's usual share of the lines below the title; it takes more where the process table needs fewer,
and less, down to GPU_LEAST_LINES, where the process table needs more."""
GPU_LEAST_LINES = 16
GPU_LEAST_LINES_EACH = 3
"""... or this many lines a GPU (a summary and two graph rows), whichever is more, but never more than its share."""
PROCESS_LEAST_LINES = 2
"""The process table's title and header (gpumon.tcss gives it this min-height)."""
JOB_TALL = 45
"""With a job attached on a narrow terminal, from this many lines the CPU and disk panes are shown too."""
GRAPH_SCROLL_STEP = 0.25
"""The arrow keys scroll the paused GPU graphs by this share of their width."""
STALE_AFTER_INTERVALS = 5
STALE_MIN_SECONDS = 3.0
"""A live source that has not delivered for STALE_AFTER_INTERVALS intervals, and at least this long, is stale."""
STALE_CHECK_SLACK = 0.05
"""Seconds past the stale threshold at which the check runs (so the silence it measures is past the threshold)."""


def _gpumon_commands() -> type[Provider]:
    """The command palette's provider, imported when the palette opens."""
    from gpumon.tui.commands import GpumonCommands

    return GpumonCommands


def _job_pane() -> JobPane:
    from gpumon.tui.job_pane import JobPane

    return JobPane(id="job")


class SnapshotArrived(Message):
    """A source delivered a snapshot (posted from the source's thread)."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class JobUpdated(Message):
    """The attached job sent something new (posted from its client's thread; the app reads job.view())."""


@runtime_checkable
class TracksPids(Protocol):
    """A snapshot source that can be told which processes to sample closely (the live Sampler; not a replay)."""

    def track_pids(self, pids: Iterable[int]) -> None: ...


@runtime_checkable
class ReadsEnergy(Protocol):
    """A snapshot source whose energy counter reads can be made rarer while no job needs joules per sample (the live
    Sampler; not a replay)."""

    def read_energy_often(self, often: bool) -> None: ...


JobOpener = Callable[["JobGroup"], "JobSource"]
"""Connects to a picked job group (may block up to about a second; the app calls it on a worker thread)."""
JOB_REDRAW_S = 0.25
"""The job pane is redrawn at most this often (steps arrive every 0.2 s)."""


class GpumonApp(App[None]):
    """The dashboard: GPU, CPU, disk panes and the process table, fed by a SnapshotSource; with a job (hooked, or
    sampled by py-spy) a job pane too, its processes highlighted and its GPU marked.

    job: the job to follow from the start. jobs: hooked jobs to offer in a picker at start (plain `gpumon`).
    extension: what the app owns besides its panes (the advisor; gpumon/tui/extension.py), else AdvisorElsewhere.
    """

    CSS_PATH = "gpumon.tcss"
    TITLE = "gpumon"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE, "-wide")]  # noqa: RUF012 - Textual types it `ClassVar[...] | None`, which mypy cannot narrow
    COMMANDS = App.COMMANDS | {_gpumon_commands}
    BINDINGS: ClassVar[list[BindingType]] = list(keys.bindings())

    paused: reactive[bool] = reactive(False)
    """Mirrors the source's paused state; shown as PAUSED in the title bar."""
    stale: reactive[bool] = reactive(False)
    """A live source stopped delivering (STALE in the title bar)."""

    def __init__(
        self,
        source: SnapshotSource,
        *,
        clock: Callable[[], float] = time.time,
        job: JobSource | None = None,
        jobs: Sequence[JobGroup] = (),
        open_job: JobOpener | None = None,
        options: ViewOptions | None = None,
        extension: Extension | None = None,
    ) -> None:
        super().__init__()
        self.extension: Extension = extension or AdvisorElsewhere()
        self.source = source
        self.options = options or ViewOptions()
        """Settings, the user and GPUs shown, where a picked theme is saved (process_actions, view_options)."""
        use_ascii(self.options.ascii)
        self.host_graphs = self.options.settings.host_graphs
        """The CPU and memory history graphs beside the GPU pane (`h`)."""
        self.clock = clock
        self.snapshot: Snapshot | None = None
        """The snapshot on screen."""
        self._latest: Snapshot | None = None
        self._delivery_pending = False
        self._delivery_lock = threading.Lock()
        self.job: JobSource | None = job
        """The job the job pane follows (None: the plain dashboard)."""
        self.offered_jobs = list(jobs)
        self._open_job = open_job
        """Connects to a picked group (None: AttachedJob.for_group)."""
        self._job_pane: JobPane | None = None
        self._wide = False
        """Whether the GPU pane sits beside the CPU and disk panes (from the size _size_panes last saw)."""
        self._job_pending = False
        self._profile_capture: ProfileCapture | None = None
        self._job_lock = threading.Lock()
        self._job_shown_at = 0.0
        self._stale_deadline: asyncio.TimerHandle | None = None
        self._terminal_size = Size(80, 24)
        """The size _size_panes last saw (on a resize, the new one before the app's own size changes)."""

    def get_driver_class(self) -> type[Driver]:
        return compacting_driver(driver_class(super().get_driver_class()))

    def get_default_screen(self) -> Screen[object]:
        return CachedScreen(id="_default")

    def compose(self) -> ComposeResult:
        self._title_bar = TitleBar()
        self._gpu_pane = GpuPane(id="gpu")
        self._cpu_pane = CpuPane(id="cpu")
        self._disk_pane = DiskPane(id="disk")
        self._process_table = ProcessTable(id="processes")
        self._process_table.control = ProcessControl(self.options.settings.read_only, self.source.live, self._ranks)
        self._process_table.user = self.options.user
        yield self._title_bar
        with CachedContainer(id="top"):
            yield self._gpu_pane
            with CachedVertical(id="side"):
                yield self._cpu_pane
                yield self._disk_pane
        self._machine_line = MachineLine(id="machine")
        yield self._machine_line
        if self.job is not None:
            self._job_pane = _job_pane()
            yield self._job_pane
        yield FilterInput(self._process_table, id="filter")
        yield self._process_table
        yield KeyBar()
        yield from self.extension.widgets()

    def on_mount(self) -> None:
        self.extension.start(self)
        freeze_after_first_frame(self)
        self._apply_settings()
        self._size_panes(self.size)
        self._update_titles()
        self.source.start(self._receive)
        if self.source.live:
            self._arm_stale_check()
        if self.job is not None:
            self._follow(self.job)
            return
        self._read_energy_for_a_job(False)
        if self.offered_jobs:
            self._push_picker(self.offered_jobs)

    def on_unmount(self) -> None:
        self.extension.stop()
        if self._stale_deadline is not None:
            self._stale_deadline.cancel()
        self.source.stop()
        if self.job is not None:
            self.job.stop()

    def _receive(self, snapshot: Snapshot) -> None:
        """Called on the source's thread: keep the newest snapshot and wake the UI once, never more."""
        with self._delivery_lock:
            self._latest = snapshot
            if self._delivery_pending:
                return
            self._delivery_pending = True
        self.post_message(SnapshotArrived(snapshot))

    @on(SnapshotArrived)
    def _show_latest(self) -> None:
        with self._delivery_lock:
            snapshot = self._latest
            self._delivery_pending = False
        if snapshot is not None:
            self.show_snapshot(snapshot)

    def show_snapshot(self, snapshot: Snapshot) -> None:
        """Redraw every pane from one snapshot (the source's history already holds it)."""
        if self._job_pane is not None:
            self._job_pane.energy.add(snapshot)  # before --only hides GPUs: the job's may be among them
        snapshot = self.options.apply(snapshot)
        if self.snapshot is None:
            report_after_first_frame(self)
        self.snapshot = snapshot
        self.stale = False
        if self.source.live:
            self._arm_stale_check()
        history = self.source.history
        self._process_table.show(snapshot.processes, gpus_seen=bool(snapshot.gpus))
        self._size_panes(self._terminal_size)
        self._gpu_pane.whole_cells = self.source.interval <= WHOLE_CELLS_UP_TO_S
        self._gpu_pane.show(snapshot, history)
        self._disk_pane.show(snapshot, history)
        self._show_cpu(snapshot)
        if self._machine_line.display:
            self._machine_line.show(snapshot)
        self._update_titles()
        if self.job is not None:
            self._show_job()

    def _process_rows_wanted(self) -> int:
        """Lines the process table needs to show every row: its title, its header and its rows."""
        table = self._process_table
        return max(PROCESS_LEAST_LINES, 2 + table.row_count) if table.display else 0

    def _show_cpu(self, snapshot: Snapshot) -> None:
        """The CPU pane; with the host graphs on, its graphs fill the side column down to the GPU pane's bottom, drawn
        as the GPU graphs are."""
        gpu = self._gpu_pane
        self._cpu_pane.show(
            snapshot.cpu, self.source.history, self._cpu_room(), gpu.graph_style, gpu.scrolled_back, gpu.whole_cells
        )

    def _cpu_room(self) -> int | None:
        """Lines the CPU pane fills beside the GPU pane: its height less the disk pane's; None when the host graphs
        are off, the panes are stacked, a job is followed, or the GPU pane is hidden."""
        gpu, disk = self._gpu_pane, self._disk_pane
        if not self.host_graphs or not self._wide or self._job_pane is not None or not gpu.display:
            return None
        disk_height = len(disk.lines(disk.size.width)) + 1 if disk.display else 0
        return len(gpu.lines(gpu.size.width)) - disk_height

    def on_resize(self, event: events.Resize) -> None:
        # Runs before App._on_resize records the new size, so take the size from the event.
        self._size_panes(event.size)
        if self.snapshot is not None:
            self.show_snapshot(self.snapshot)

    def _size_panes(self, size: Size) -> None:
        """Give the GPU pane and the core grid more lines on tall and wide terminals; wide, every line the process
        table does not need goes to the GPU pane, and the process table gets more where it has many rows."""
        self._terminal_size = size
        width, height = size
        wide = self._wide = width >= WIDE
        self._gpu_pane.fill = False
        if self._job_pane is None:
            self._cpu_pane.max_core_rows = max(1, (height - 2) // 8) if wide else 1
            if not wide:
                # The CPU and disk panes sit under the GPU pane; the process table keeps room for a title, a header
                # and about seven rows.
                self._gpu_pane.max_lines = max(4, min(int((height - 2) * 0.6), height - 18))
                return
            # The GPU pane shares the top with the CPU and disk panes (whose host graphs fill down to its bottom).
            usual = int((height - 2) * GPU_SHARE)
            # Less the title bar, the footer and the pane's border.
            spare = height - 2 - 1 - self._process_rows_wanted()
            gpus = len(self.snapshot.gpus) if self.snapshot is not None else 1
            least = min(usual, max(GPU_LEAST_LINES, GPU_LEAST_LINES_EACH * gpus))
            self._gpu_pane.fill = spare >= least
            self._gpu_pane.max_lines = max(4, spare if spare >= least else least)
            return
        # With a job the job pane takes the room: the GPU pane gets less and, when short, the CPU and disk panes go.
        self._gpu_pane.max_lines = max(2, int((height - 2) * (0.3 if wide else 0.15)))
        self._cpu_pane.max_core_rows = 1
        self._job_pane.max_lines = max(4, min(14, int((height - 2) * 0.4)))
        short = not wide and height < JOB_TALL
        self.screen.set_class(short, "-job-short")
        self._machine_line.display = short

    def _update_titles(self) -> None:
        """Title: host, the snapshot's own time (never the wall clock) and PAUSED; subtitle: source and interval.

        Shown in the TitleBar; App.title (whose every change repaints the whole screen) changes only with the host.
        """
        snapshot = self.snapshot
        host = printable(snapshot.hostname) if snapshot is not None else ""
        title_parts = ["gpumon", host] if host else ["gpumon"]
        app_title = " · ".join(title_parts)
        if snapshot is not None:
            title_parts.append(time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp)))
        if self.paused:
            title_parts.append("PAUSED")
        if self.stale:
            title_parts.append("STALE")
        description = self.source.description
        sub_title = f"{description} · every {self.source.interval:.3g}s"
        if self.title != app_title:
            self.title = app_title
        self._title_bar.show(" · ".join(title_parts), sub_title)

    def watch_paused(self) -> None:
        self._update_titles()

    def watch_stale(self) -> None:
        self._update_titles()

    def check_stale(self) -> None:
        """Flag a live source that stopped delivering (judged by the injected clock)."""
        if self.snapshot is None or self.paused:
            return
        silence = self.clock() - self.snapshot.timestamp
        self.stale = silence > self._stale_after()

    def _stale_after(self) -> float:
        return max(STALE_MIN_SECONDS, STALE_AFTER_INTERVALS * self.source.interval)

    def _arm_stale_check(self) -> None:
        """Check for staleness once no snapshot has come for the stale threshold: a deadline each snapshot moves on,
        so a source that keeps delivering never wakes the UI for it. (A Textual interval timer woke the event loop
        every second, about 0.3 ms of CPU a wake on the VM: benchmarks/README.md, "Dashboard CPU cost".)"""
        if self._stale_deadline is not None:
            self._stale_deadline.cancel()
        delay = self._stale_after() + STALE_CHECK_SLACK
        self._stale_deadline = asyncio.get_running_loop().call_later(delay, self.call_later, self._stale_due)

    def _stale_due(self) -> None:
        self._stale_deadline = None
        self.check_stale()
        if not self.stale and not self.paused and self.snapshot is not None:
            self._arm_stale_check()  # the clock is not the loop's: look again

    def action_toggle_pause(self) -> None:
        if self.source.paused:
            self._gpu_pane.scroll_graphs(0)
            self._redraw_cpu()
            self.source.resume()
        else:
            self.source.pause()
        self.paused = self.source.paused

    def action_faster(self) -> None:
        self.source.faster()
        self._update_titles()

    def action_slower(self) -> None:
        self.source.slower()
        self._update_titles()

    def action_toggle_graph_style(self) -> None:
        """Draw the GPU graphs in braille or in block characters (in ASCII, only ASCII)."""
        if self.options.ascii:
            self.notify("graphs in ASCII (--ascii, or a terminal without UTF-8)", timeout=3)
            return
        style = GraphStyle.BLOCKS if self._gpu_pane.graph_style is GraphStyle.BRAILLE else GraphStyle.BRAILLE
        self._gpu_pane.set_graph_style(style)
        self._redraw_cpu()
        self.notify(f"GPU graphs in {style.value}", timeout=3)

    def action_toggle_host_graphs(self) -> None:
        """Show or hide the CPU and memory history graphs beside the GPU pane."""
        self.host_graphs = not self.host_graphs
        self._redraw_cpu()
        shown = "shown" if self.host_graphs else "hidden"
        self.notify(f"CPU and memory graphs {shown}" + ("" if self._wide else " (on wide terminals)"), timeout=3)

    def action_scroll_graphs(self, quarters: int) -> None:
        """While paused: scroll the graphs back (1) or forward (-1) by a quarter of the GPU graphs' width; 0: the
        newest."""
        pane = self._gpu_pane
        pane.scroll_graphs(round(quarters * GRAPH_SCROLL_STEP * pane.graph_samples()))
        self._redraw_cpu()

    def on_gpu_pane_resized(self) -> None:
        self._redraw_cpu()

    def _redraw_cpu(self) -> None:
        """The CPU pane's graphs scrolled or restyled as the GPU pane's just were."""
        if self.snapshot is not None:
            self._show_cpu(self.snapshot)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The arrows scroll the graphs only while paused on the dashboard, the filter line closed; otherwise they go to
        # the process table or move the filter line's cursor.
        if action == "scroll_graphs":
            return self.paused and self.screen is self.screen_stack[0] and not isinstance(self.focused, Input)
        return True

    def action_cycle_sort(self) -> None:
        self._process_table.cycle_sort()

    def action_reverse_sort(self) -> None:
        self._process_table.reverse_sort()

    def _apply_settings(self) -> None:
        """The config file's theme, graph style, sort and hidden panes; its problems as notifications."""
        settings = self.options.settings
        for warning in self.options.warnings:
            self.notify(printable(warning), severity="warning", timeout=8, markup=False)
        if settings.theme in self.available_themes:
            self.theme = settings.theme
        else:
            self.notify(
                f"config: theme {printable(settings.theme)!r} is not a theme here; the default is used",
                severity="warning",
                timeout=8,
                markup=False,
            )
        self._saved_theme = self.theme
        self.theme_changed_signal.subscribe(self, lambda _theme: self._save_theme())
        self._gpu_pane.set_graph_style(GraphStyle.ASCII if self.options.ascii else GraphStyle(settings.graph_style))
        if settings.default_sort != self._process_table.sort_column:
            self._process_table.sort_by(settings.default_sort)
        panes: dict[str, Widget] = {
            "gpu": self._gpu_pane,
            "cpu": self._cpu_pane,
            "disk": self._disk_pane,
            "processes": self._process_table,
        }
        for name in settings.hidden_panes:
            panes[name].display = False

    def _save_theme(self) -> None:
        """Keep the theme picked in the command palette in the config file (one line, nothing else touched)."""
        path = self.options.config_file
        if path is None or self.theme == self._saved_theme:
            return
        self._saved_theme = self.theme
        error = save_setting("theme", self.theme, path)
        if error is not None:
            self.notify(printable(error), severity="warning", timeout=8, markup=False)

    def _ranks(self) -> list[list[int]]:
        """The ranks of every hooked job known here (attached or offered), for a job-wide signal."""
        groups = [group.pids for group in self.offered_jobs]
        if self.job is not None:
            groups.append(self.job.view().pids)
        return groups

    def action_help(self) -> None:
        from gpumon.tui.help_screen import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            job = self.job is not None or bool(self.offered_jobs)
            self.push_screen(HelpScreen(job=job, advisor=self.extension.keys is keys.Where.ADVISOR))

    def action_health(self) -> None:
        from gpumon.tui.health_screen import HealthScreen

        if not isinstance(self.screen, HealthScreen):
            self.push_screen(HealthScreen(self.snapshot))

    async def run_action(
        self,
        action: str | ActionParseResult,
        default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """An action of the app's that it has no method for goes to its extension (the key table's a and g)."""
        if await super().run_action(action, default_namespace, namespaces):
            return True
        if default_namespace not in (None, self) or not isinstance(action, str):
            return False
        return self.extension.run_action(action)

    # -- the attached job ----------------------------------------------------------------------

    def _follow(self, job: JobSource) -> None:
        """Show `job` in the job pane (mounted now if the app started without one) and start its client."""
        self.job = job
        self._read_energy_for_a_job(True)
        if self._job_pane is None:
            self._job_pane = _job_pane()
            self.mount(self._job_pane, before=self._process_table)
        self._size_panes(self.size)
        job.start(self._job_signal)
        self._show_job()

    def _read_energy_for_a_job(self, often: bool) -> None:
        """A followed job's joules per sample need the energy counter at every health read; the plain dashboard's
        cumulative figure does not."""
        if isinstance(self.source, ReadsEnergy):
            self.source.read_energy_often(often)

    def _job_signal(self, _what: str) -> None:
        """Called on the job client's thread: wake the UI once, however many messages arrive meanwhile."""
        with self._job_lock:
            if self._job_pending:
                return
            self._job_pending = True
        self.post_message(JobUpdated())

    @on(JobUpdated)
    def _job_updated(self) -> None:
        wait = JOB_REDRAW_S - (time.monotonic() - self._job_shown_at)
        if wait > 0:
            self.set_timer(wait, self._job_updated_now)
        else:
            self._job_updated_now()

    def _job_updated_now(self) -> None:
        with self._job_lock:
            self._job_pending = False
        self._show_job()

    def _show_job(self) -> None:
        """Redraw the job pane from a copy of the job's state; highlight its processes and mark its GPU."""
        job, pane = self.job, self._job_pane
        if job is None or pane is None or self.paused:
            return
        self._job_shown_at = time.monotonic()
        view = job.view()
        pane.show(view)
        self._process_table.highlight_job(view.pids, view.worker_pids)
        self._gpu_pane.mark_job(view.device_uuids)
        if isinstance(self.source, TracksPids):
            self.source.track_pids(view.pids)

    def _picked(self, group: JobGroup | None) -> None:
        if group is None:
            return
        self.notify(f"attaching to {printable(group.label)}", timeout=3, markup=False)
        self.run_worker(lambda: self._connect(group), thread=True, exclusive=True, group="attach")

    def _connect(self, group: JobGroup) -> None:
        """On a worker thread: connect to the picked job, then follow it on the UI thread."""
        from gpumon.jobs.discovery import AttachError
        from gpumon.jobs.session import AttachedJob

        try:
            job = (self._open_job or AttachedJob.for_group)(group)
        except (AttachError, OSError) as error:
            self.call_from_thread(
                self.notify, f"cannot attach: {printable(str(error))}", severity="error", timeout=8, markup=False
            )
            return
        self.call_from_thread(self.switch_to, job)

    def switch_to(self, job: JobSource) -> None:
        """Follow `job` instead of the job followed now (which is stopped)."""
        previous = self.job
        if previous is not None:
            previous.stop()
        self._follow(job)

    def action_capture_profile(self) -> None:
        """`c`: a torch.profiler capture of the followed job (its primary rank), summarized when written."""
        if self._profile_capture is None:
            from gpumon.tui.profile_screen import ProfileCapture

            self._profile_capture = ProfileCapture(self)
        self._profile_capture.request(self.job)

    def action_pick_job(self) -> None:
        """Look for hooked jobs (on a worker thread) and offer them."""
        self.run_worker(self._scan_jobs, thread=True, exclusive=True, group="scan")

    def _scan_jobs(self) -> None:
        from gpumon.jobs.discovery import scan

        groups = scan().groups
        self.call_from_thread(self._offer, groups)

    def _offer(self, groups: list[JobGroup]) -> None:
        if not groups:
            self.notify(
                "no hooked jobs found (add `import gpumon.hook`, or start one with `gpumon run -- ...`)", timeout=6
            )
            return
        self.offered_jobs = groups
        self._push_picker(groups)

    def _push_picker(self, groups: Sequence[JobGroup]) -> None:
        from gpumon.tui.job_picker import JobPicker

        if not isinstance(self.screen, JobPicker):
            self.push_screen(JobPicker(groups), self._picked)
