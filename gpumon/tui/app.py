"""The gpumon Textual app: thin views over snapshots that a SnapshotSource posts from its own thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Footer

from gpumon.sampling.snapshot import Snapshot
from gpumon.sampling.source import SnapshotSource
from gpumon.tui.commands import GpumonCommands
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.help_screen import HelpScreen
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.title_bar import TitleBar

WIDE = 140
"""From this many columns the GPU pane sits beside the CPU and disk panes."""
STALE_AFTER_INTERVALS = 5
"""A live source that has not delivered for this many intervals (and at least 3 s) is marked stale."""


class SnapshotArrived(Message):
    """A source delivered a snapshot (posted from the source's thread)."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class GpumonApp(App[None]):
    """The dashboard: GPU, CPU, disk panes and the process table, fed by a SnapshotSource."""

    CSS_PATH = "gpumon.tcss"
    TITLE = "gpumon"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE, "-wide")]
    COMMANDS = App.COMMANDS | {GpumonCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit", tooltip="Stop sampling and leave gpumon"),
        Binding("p", "toggle_pause", "Pause", id="pause", tooltip="Freeze the dashboard; p again resumes"),
        Binding("plus", "faster", "Faster", key_display="+", id="faster", tooltip="Shorter interval (replay: faster)"),
        Binding("minus", "slower", "Slower", key_display="-", id="slower", tooltip="Longer interval (replay: slower)"),
        Binding("s", "cycle_sort", "Sort", id="sort", tooltip="Sort processes by the next column"),
        Binding("S", "reverse_sort", "Reverse", id="reverse-sort", show=False, tooltip="Reverse the process order"),
        Binding("question_mark", "help", "Help", key_display="?", id="help", tooltip="Keys and what each field means"),
    ]

    paused: reactive[bool] = reactive(False)
    """Mirrors the source's paused state; shown as PAUSED in the title bar."""
    stale: reactive[bool] = reactive(False)
    """A live source stopped delivering (STALE in the title bar)."""

    def __init__(self, source: SnapshotSource, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.source = source
        self.clock = clock
        self.snapshot: Snapshot | None = None
        """The snapshot on screen."""
        self._latest: Snapshot | None = None
        self._delivery_pending = False
        self._delivery_lock = threading.Lock()

    def compose(self) -> ComposeResult:
        self._title_bar = TitleBar()
        self._gpu_pane = GpuPane(id="gpu")
        self._cpu_pane = CpuPane(id="cpu")
        self._disk_pane = DiskPane(id="disk")
        self._process_table = ProcessTable(id="processes")
        yield self._title_bar
        with Container(id="top"):
            yield self._gpu_pane
            with Vertical(id="side"):
                yield self._cpu_pane
                yield self._disk_pane
        yield self._process_table
        yield Footer()

    def on_mount(self) -> None:
        self._size_panes(self.size)
        self._update_titles()
        self.source.start(self._receive)
        if self.source.live:
            self.set_interval(1.0, self.check_stale)

    def on_unmount(self) -> None:
        self.source.stop()

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
        self.snapshot = snapshot
        self.stale = False
        history = self.source.history
        self._gpu_pane.show(snapshot, history)
        self._cpu_pane.show(snapshot.cpu, history)
        self._disk_pane.show(snapshot, history)
        self._process_table.show(snapshot.processes)
        self._update_titles()

    def on_resize(self, event: events.Resize) -> None:
        # Runs before App._on_resize records the new size, so take the size from the event.
        self._size_panes(event.size)
        if self.snapshot is not None:
            self.show_snapshot(self.snapshot)

    def _size_panes(self, size: Size) -> None:
        """Give the GPU pane and the core grid more lines on tall and wide terminals."""
        width, height = size
        wide = width >= WIDE
        self._gpu_pane.max_lines = max(4, int((height - 2) * (0.6 if wide else 0.3)))
        self._cpu_pane.max_core_rows = max(1, (height - 2) // 8) if wide else 1

    def _update_titles(self) -> None:
        """Title: host, the snapshot's own time (never the wall clock) and PAUSED; subtitle: source and interval.

        Shown in the TitleBar; App.title (whose every change repaints the whole screen) changes only with the host.
        """
        snapshot = self.snapshot
        host = snapshot.hostname if snapshot is not None else ""
        title_parts = ["gpumon", host] if host else ["gpumon"]
        app_title = " · ".join(title_parts)
        if snapshot is not None:
            title_parts.append(time.strftime("%H:%M:%S", time.localtime(snapshot.timestamp)))
        if self.paused:
            title_parts.append("PAUSED")
        if self.stale:
            title_parts.append("STALE")
        sub_title = f"{self.source.description} · every {self.source.interval:.3g}s"
        if self.title != app_title:
            self.title = app_title
        self._title_bar.show(" · ".join(title_parts), sub_title)

    def watch_paused(self) -> None:
        self._update_titles()

    def watch_stale(self) -> None:
        self._update_titles()

    def check_stale(self) -> None:
        """Flag a live source that stopped delivering (judged by the injected clock, once a second)."""
        if self.snapshot is None or self.paused:
            return
        silence = self.clock() - self.snapshot.timestamp
        self.stale = silence > max(3.0, STALE_AFTER_INTERVALS * self.source.interval)

    def action_toggle_pause(self) -> None:
        if self.source.paused:
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

    def action_cycle_sort(self) -> None:
        self._process_table.cycle_sort()

    def action_reverse_sort(self) -> None:
        self._process_table.reverse_sort()

    def sort_processes_by(self, column: str) -> None:
        """Sort the process table by a SORT_COLUMNS key (the command palette's 'Sort processes by ...')."""
        self._process_table.sort_by(column)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())
