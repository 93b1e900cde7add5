"""The process table: GPU processes with their workers beneath them, sortable, updated cell by cell."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import DataTable

from gpumon import units
from gpumon.printable import printable
from gpumon.sampling.process_tree import ProcessTreeCollector
from gpumon.sampling.snapshot import ProcessSample
from gpumon.tui import keys
from gpumon.tui._textual_compat import CellTable
from gpumon.tui.command_text import command_shown
from gpumon.tui.format import format_state, state_letter
from gpumon.tui.process_actions import ProcessControl
from gpumon.units import MISSING

BRANCH = "├─ "
LAST_BRANCH = "└─ "
WIDE_TABLE = 110
"""From this many columns the table shows R/s and W/s and the state as a word; narrower, tighter columns (NARROW)."""
PID_WIDTH = 7
"""Linux pids have at most 7 digits (pid_max 4194304); the tree's branches are drawn in the command column."""
MAX_DEPTH = 32
"""Process trees are shown this many levels deep at most."""
MIN_COMMAND_WIDTH = 12
CELL_PADDING = 1
NO_GPU_LIVE = "no GPU seen: v shows every process as a tree"
"""The title's hint where no GPU is seen (no driver, no NVML): the GPU process list would stay empty."""
NO_GPU_REPLAY = "no GPU in this sample"
ALL_PROCESSES_EVERY_S = 1.0
"""With all processes shown, the process list is read this often (on a worker thread)."""


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    width: int
    right: bool = True


COLUMNS = (
    Column("pid", "PID", PID_WIDTH, right=False),
    Column("user", "USER", 9, right=False),
    Column("gpu", "GPU", 3),
    Column("gpu_memory", "GPU-MEM", 7),
    Column("sm_percent", "SM%", 4),
    Column("cpu_percent", "CPU%", 5),
    Column("rss", "RSS", 6),
    Column("state", "STATE", 5, right=False),
    Column("read", "R/s", 7),
    Column("write", "W/s", 7),
)
NARROW = (
    Column("pid", "PID", PID_WIDTH, right=False),
    Column("user", "USER", 8, right=False),
    Column("gpu", "GPU", 3),
    Column("gpu_memory", "GPU-MEM", 7),
    Column("sm_percent", "SM%", 4),
    Column("cpu_percent", "CPU%", 4),
    Column("rss", "RSS", 5),
    Column("state", "S", 1, right=False),
)
"""The columns below WIDE_TABLE (80x24 leaves the command about 19 cells): the state as ps's letter."""
COMMAND = Column("command", "COMMAND", MIN_COMMAND_WIDTH, right=False)


@dataclass(frozen=True, slots=True)
class SortColumn:
    label: str
    value: Callable[[ProcessSample], Any]
    descending: bool
    """The natural direction: biggest first for amounts, ascending for PID and command."""


def _amount(value: float | None) -> float:
    return -math.inf if value is None else float(value)


SORT_COLUMNS: dict[str, SortColumn] = {
    "gpu_memory": SortColumn("GPU-MEM", lambda p: _amount(p.gpu_memory), True),
    "sm_percent": SortColumn("SM%", lambda p: _amount(p.sm_percent), True),
    "cpu_percent": SortColumn("CPU%", lambda p: _amount(p.cpu_percent), True),
    "rss": SortColumn("RSS", lambda p: _amount(p.rss), True),
    "read": SortColumn("R/s", lambda p: _amount(p.read_bytes_per_s), True),
    "write": SortColumn("W/s", lambda p: _amount(p.write_bytes_per_s), True),
    "pid": SortColumn("PID", lambda p: p.pid, False),
    "command": SortColumn("COMMAND", lambda p: p.command, False),
}
"""The columns `s` cycles through, in order."""


JOB_STYLES = {"job": "bold magenta", "worker": "magenta"}
"""Row styles of the attached job's processes (its ranks) and of its DataLoader workers."""


class PidCell(Text):
    """The PID cell (bold for a tree's root); carries the pid so the table can be sorted by a computed rank."""

    def __init__(self, pid: int, child: bool, role: str = "") -> None:
        super().__init__(no_wrap=True, overflow="ellipsis", end="", style=JOB_STYLES.get(role, ""))
        self.pid = pid
        self.append(str(pid), style="" if child else "bold")


def command_cell(command: str, branch: str, width: int | None, style: str) -> Text:
    """The COMMAND cell: the process's tree branch (its indentation and ├─ or └─), then its command line, shown
    from what matters where the whole line does not fit (command_text). An indentation deeper than half the column is
    cut from the left, so the command keeps the other half."""
    if width is not None and len(branch) > width // 2:
        branch = branch[len(branch) - width // 2 :]
    if width is not None:
        command = command_shown(command, max(1, width - len(branch)))
    cell = _cell("", right=False, style=style)
    if branch:
        cell.append(branch, style="bright_black")
    cell.append(command)
    return cell


def tree_order(
    processes: Sequence[ProcessSample], sort_column: str, descending: bool
) -> list[tuple[ProcessSample, str]]:
    """(process, branch) in display order: jobs sorted, each job's descendants right beneath it, sorted the same way.

    The branch is '' for a job, '├─ ' or '└─ ' for a child, indented under its parent where trees nest (all
    processes). A pid listed twice is shown once; trees deeper than MAX_DEPTH are cut.
    """
    sort = SORT_COLUMNS[sort_column]

    def ordered(group: Sequence[ProcessSample]) -> list[ProcessSample]:
        by_pid = sorted(group, key=lambda process: process.pid)
        return sorted(by_pid, key=sort.value, reverse=descending)

    seen: set[int] = set()
    rows: list[tuple[ProcessSample, str]] = []

    def add_children(parent: ProcessSample, indent: str, depth: int) -> None:
        children = [child for child in ordered(parent.children) if child.pid not in seen]
        seen.update(child.pid for child in children)
        for position, child in enumerate(children):
            last = position == len(children) - 1
            rows.append((child, indent + (LAST_BRANCH if last else BRANCH)))
            if child.children and depth < MAX_DEPTH:
                add_children(child, indent + ("   " if last else "│  "), depth + 1)

    for job in ordered(processes):
        if job.pid in seen:
            continue
        seen.add(job.pid)
        rows.append((job, ""))
        add_children(job, "", 1)
    return rows


def _matches(process: ProcessSample, needle: str) -> bool:
    return (
        needle in process.command.lower()
        or needle in (process.user or "").lower()
        or str(process.pid).startswith(needle)
    )


def prune(processes: Sequence[ProcessSample], keep: Callable[[ProcessSample], bool]) -> tuple[ProcessSample, ...]:
    """The processes `keep` accepts, each with all its descendants, and the ancestors of those (so the trees stay
    readable)."""

    def pruned(process: ProcessSample, depth: int) -> ProcessSample | None:
        if keep(process):
            return process
        if depth >= MAX_DEPTH:
            return None
        children = tuple(kept for child in process.children if (kept := pruned(child, depth + 1)) is not None)
        return replace(process, children=children) if children else None

    return tuple(kept for process in processes if (kept := pruned(process, 0)) is not None)


def filter_tree(processes: Sequence[ProcessSample], text: str) -> tuple[ProcessSample, ...]:
    """The processes whose command line, user or pid (its start) holds `text` (any case), with their trees (prune).
    Empty text: all of them."""
    needle = text.strip().lower()
    if not needle:
        return tuple(processes)
    return prune(processes, lambda process: _matches(process, needle))


def subtree_pids(process: ProcessSample) -> set[int]:
    """The pids of a process and all its descendants as shown."""
    pids = {process.pid}
    for child in process.children:
        pids |= subtree_pids(child)
    return pids


def _cell(value: str, *, right: bool = True, style: str = "") -> Text:
    return Text(value, style=style, justify="right" if right else "left", no_wrap=True, overflow="ellipsis", end="")


def _percent(value: float | None, is_worker: bool) -> str:
    if value is None:
        return "" if is_worker else MISSING
    return f"{value:.0f}"


def row_cells(
    process: ProcessSample, branch: str, role: str = "", *, command_width: int | None = None, narrow: bool = False
) -> dict[str, Text]:
    """Every column's cell for one process, keyed by column key. role: 'job' or 'worker' of the attached job.
    command_width: the command column's cells (a command line longer is shown from what matters, command_text);
    narrow: the state as ps's letter (NARROW)."""
    is_worker = bool(branch)
    state = format_state(process.state)
    state_style = {"disk": "bold yellow", "zomb": "bold red"}.get(state, "")
    gpu_memory = "" if is_worker and process.gpu_memory is None else units.size(process.gpu_memory, compact=True)
    return {
        "pid": PidCell(process.pid, is_worker, role),
        "user": _cell(printable(process.user or "?"), right=False),
        "gpu": _cell(",".join(str(index) for index in process.gpu_indices)),
        "gpu_memory": _cell(gpu_memory),
        "sm_percent": _cell(_percent(process.sm_percent, is_worker)),
        "cpu_percent": _cell(_percent(process.cpu_percent, False)),
        "rss": _cell(units.size(process.rss, compact=True)),
        "state": _cell(state_letter(process.state) if narrow else state, right=False, style=state_style),
        "read": _cell(units.rate(process.read_bytes_per_s, compact=True, binary=True)),
        "write": _cell(units.rate(process.write_bytes_per_s, compact=True, binary=True)),
        "command": command_cell(
            printable(process.command),
            branch,
            command_width,
            JOB_STYLES.get(role) or ("bright_black" if is_worker else ""),
        ),
    }


def with_gpu_use(trees: Sequence[ProcessSample], gpu_processes: Sequence[ProcessSample]) -> tuple[ProcessSample, ...]:
    """Process trees with the GPU columns (GPUs, GPU memory, SM%) of the GPU processes among them."""
    gpu_use = {process.pid: process for process in gpu_processes if process.gpu_indices}

    def merged(process: ProcessSample, depth: int) -> ProcessSample:
        use = gpu_use.get(process.pid)
        children = tuple(merged(child, depth + 1) for child in process.children) if depth < MAX_DEPTH else ()
        if use is None:
            return replace(process, children=children)
        return replace(
            process,
            gpu_indices=use.gpu_indices,
            gpu_memory=use.gpu_memory,
            sm_percent=use.sm_percent,
            children=children,
        )

    shown = tuple(merged(process, 0) for process in trees)
    present: set[int] = set()
    for process in shown:
        present |= subtree_pids(process)
    # A GPU process the process list does not hold (another PID namespace) is still shown.
    return shown + tuple(process for process in gpu_processes if process.pid not in present)


class FilterLine(Protocol):
    """The filter line under the table (gpumon.tui.filter_input.FilterInput)."""

    def open(self) -> None: ...

    def action_clear(self) -> None: ...


def _signature(cell: Text) -> tuple[str, str]:
    return cell.plain, str(cell.style)


def column_layout(width: int) -> tuple[tuple[Column, ...], int]:
    """The columns that fit a table `width` cells wide, and the command column's width (the rest)."""
    columns = COLUMNS if width >= WIDE_TABLE else NARROW
    used = sum(column.width + 2 * CELL_PADDING for column in columns) + 2 * CELL_PADDING + 1
    return (*columns, COMMAND), max(MIN_COMMAND_WIDTH, width - used)


class ProcessTable(CellTable):
    """GPU processes and their child processes (or every process, as trees); row keys are pids and the cursor follows
    its pid. `/` filters the rows live; I, T, K signal the highlighted process or its whole job (process_actions)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *keys.process_bindings(),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="filter-clear"),
    ]

    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    """

    sort_column: reactive[str] = reactive("gpu_memory")
    """Key in SORT_COLUMNS that orders the jobs, and the workers under each job."""
    sort_descending: reactive[bool] = reactive(True)
    """Biggest first when True."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(cursor_type="row", cell_padding=CELL_PADDING, id=id, classes=classes)
        self._processes: Sequence[ProcessSample] = ()
        self._layout: tuple[tuple[Column, ...], int] | None = None
        self._cells: dict[int, dict[str, tuple[str, str]]] = {}
        self._order: list[int] = []
        self._job_pids: frozenset[int] = frozenset()
        self._worker_pids: frozenset[int] = frozenset()
        self.filter_text = ""
        """Shown: only the processes whose command line, user or pid holds this (with their trees)."""
        self.user: str | None = None
        """Shown: only this user's processes (with their ancestors), set by the app (--user)."""
        self.control = ProcessControl()
        """What signalling may do here (read-only, a replay), set by the app."""
        self.all_processes = False
        """Every process with its tree (live only), else the GPU processes and their descendants."""
        self._gpu_processes: Sequence[ProcessSample] = ()
        self.gpus_seen = True
        """The newest snapshot had GPUs; without any, the title says how to list every process instead."""
        self._every_process: tuple[ProcessSample, ...] = ()
        self._tree_collector: ProcessTreeCollector | None = None
        self._all_timer: Timer | None = None
        self.filter_line: FilterLine | None = None
        """The line `/` opens (it registers itself here)."""

    @property
    def cursor_pid(self) -> int | None:
        """The pid of the highlighted row, or None when the table is empty."""
        if not self.row_count:
            return None
        row_key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        return int(row_key.value) if row_key.value is not None else None

    @property
    def pids(self) -> list[int]:
        """The pids in display order."""
        return list(self._order)

    def show(self, processes: Sequence[ProcessSample], gpus_seen: bool = True) -> None:
        """Show these GPU processes; a no-op when they equal the ones shown (the sampler's slow tier repeats them).
        `gpus_seen`: the snapshot had GPUs (without, the title points to `v`).

        With all processes on, they only lend their GPU columns to the process trees."""
        if gpus_seen != self.gpus_seen:
            self.gpus_seen = gpus_seen
            self._update_title()
        if processes == self._gpu_processes and self._layout is not None:
            return
        self._gpu_processes = processes
        self._show_rows()

    def _show_rows(self) -> None:
        rows = with_gpu_use(self._every_process, self._gpu_processes) if self.all_processes else self._gpu_processes
        if self.user is not None:
            user = self.user
            rows = prune(rows, lambda process: process.user == user)
        self._processes = filter_tree(rows, self.filter_text)
        self._sync()

    def set_filter(self, text: str) -> None:
        """Show only the processes whose command line, user or pid holds `text` (with their trees); '' shows all."""
        if text != self.filter_text:
            self.filter_text = text
            self._show_rows()

    def process(self, pid: int) -> ProcessSample | None:
        """The shown process with this pid."""

        def find(processes: Sequence[ProcessSample]) -> ProcessSample | None:
            for process in processes:
                found = process if process.pid == pid else find(process.children)
                if found is not None:
                    return found
            return None

        return find(self._processes)

    def job_head(self, pid: int) -> int:
        """The process whose job `pid` belongs to: with GPU processes, the GPU process above a worker row; with all
        processes, the process itself (its parent may be a shell or init)."""
        if not self.all_processes:
            for process in self._processes:
                if pid in subtree_pids(process):
                    return process.pid
        return pid

    def action_signal(self, name: str) -> None:
        pid = self.cursor_pid
        if pid is None:
            self.app.notify("no process highlighted", severity="warning", timeout=3)
            return
        shown = self.process(pid)
        self.control.request(self.app, name, pid, self.job_head(pid), shown.command if shown is not None else "")

    def action_open_filter(self) -> None:
        if self.filter_line is not None:
            self.filter_line.open()

    def action_clear_filter(self) -> None:
        if self.filter_line is not None:
            self.filter_line.action_clear()

    def action_toggle_all_processes(self) -> None:
        """GPU processes only <-> every process with its tree (a live dashboard only)."""
        if not self.all_processes and not self.control.live:
            self.app.notify("a recording holds only the GPU processes and their children", timeout=4)
            return
        self.all_processes = not self.all_processes
        if self.all_processes:
            self._tree_collector = ProcessTreeCollector()
            self._collect_every_process()
            self._all_timer = self.set_interval(ALL_PROCESSES_EVERY_S, self._collect_every_process)
        else:
            if self._all_timer is not None:
                self._all_timer.stop()
            self._all_timer = self._tree_collector = None
            self._every_process = ()
        self._show_rows()

    def _collect_every_process(self) -> None:
        self.run_worker(self._collect_on_thread, thread=True, exclusive=True, group="all-processes")

    def _collect_on_thread(self) -> None:
        collector = self._tree_collector
        if collector is None:
            return
        every_process = collector.collect()
        self.app.call_from_thread(self._collected, collector, every_process)

    def _collected(self, collector: ProcessTreeCollector, every_process: tuple[ProcessSample, ...]) -> None:
        if collector is self._tree_collector:
            self._every_process = every_process
            self._show_rows()

    def highlight_job(self, job_pids: Iterable[int], worker_pids: Iterable[int] = ()) -> None:
        """Highlight the attached job's processes and its DataLoader workers (empty: no highlight)."""
        jobs, workers = frozenset(job_pids), frozenset(worker_pids)
        if (jobs, workers) == (self._job_pids, self._worker_pids):
            return
        self._job_pids, self._worker_pids = jobs, workers
        self._sync()

    def role(self, pid: int) -> str:
        """'job', 'worker' or '' for a pid, as highlighted."""
        return "job" if pid in self._job_pids else "worker" if pid in self._worker_pids else ""

    def cycle_sort(self) -> None:
        """Sort by the next column in SORT_COLUMNS, in its natural direction."""
        keys = list(SORT_COLUMNS)
        following = keys[(keys.index(self.sort_column) + 1) % len(keys)]
        self.sort_descending = SORT_COLUMNS[following].descending
        self.sort_column = following

    def sort_by(self, column: str) -> None:
        self.sort_descending = SORT_COLUMNS[column].descending
        self.sort_column = column

    def reverse_sort(self) -> None:
        self.sort_descending = not self.sort_descending

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column's header sorts by it; on the sorted column's, reverses the order."""
        event.stop()
        key = event.column_key.value
        if key == self.sort_column:
            self.reverse_sort()
        elif key in SORT_COLUMNS:
            self.sort_by(key)
        else:
            sortable = ", ".join(column.label for column in SORT_COLUMNS.values())
            self.app.notify(f"{printable(str(event.label.plain))} is not a sort column ({sortable})", timeout=4)

    def watch_sort_column(self) -> None:
        self._sync()

    def watch_sort_descending(self) -> None:
        self._sync()

    def on_resize(self, event: events.Resize) -> None:
        if column_layout(self._table_width()) != self._layout:
            self._sync()

    def _table_width(self) -> int:
        return self.size.width or self.app.size.width

    def _rebuild_columns(self, layout: tuple[tuple[Column, ...], int]) -> None:
        # Only when the column set or the command width changes (a resize); rows are re-added by _sync.
        self.clear(columns=True)
        columns, command_width = layout
        for column in columns:
            width = command_width if column is COMMAND else column.width
            label = Text(column.label, justify="right" if column.right else "left")
            self.add_column(label, width=width, key=column.key)
        self._layout = layout
        self._cells = {}
        self._order = []

    def _sync(self) -> None:
        if not self.is_mounted:
            return
        cursor_pid = self.cursor_pid
        width = self._table_width()
        layout = column_layout(width)
        if layout != self._layout:
            self._rebuild_columns(layout)
        column_keys = [column.key for column in layout[0]]
        rows = tree_order(self._processes, self.sort_column, self.sort_descending)
        wanted = {process.pid for process, _ in rows}

        for pid in [pid for pid in self._order if pid not in wanted]:
            self.remove_row(str(pid))
            del self._cells[pid]
        table_order = [pid for pid in self._order if pid in wanted]

        changed: dict[int, dict[str, Text]] = {}
        for process, branch in rows:
            cells = row_cells(
                process, branch, self.role(process.pid), command_width=layout[1], narrow=width < WIDE_TABLE
            )
            signatures = {key: _signature(cells[key]) for key in column_keys}
            previous = self._cells.get(process.pid)
            if previous is None:
                self.add_row(*(cells[key] for key in column_keys), key=str(process.pid))
                table_order.append(process.pid)
            else:
                changes = {key: cells[key] for key in column_keys if previous[key] != signatures[key]}
                if changes:
                    changed[process.pid] = changes
            self._cells[process.pid] = signatures
        self.replace_cells(changed)

        order = [process.pid for process, _ in rows]
        if order != table_order:
            rank = {pid: position for position, pid in enumerate(order)}
            self.sort("pid", key=lambda cell: rank[cell.pid])
        self._order = order
        if cursor_pid in wanted and order.index(cursor_pid) != self.cursor_row:
            self.move_cursor(row=order.index(cursor_pid), animate=False)
        self._update_title()

    def _gpu_count_text(self) -> str:
        """'2 on GPU'; with no GPU seen, how to list every process instead (live) or that the recording has none."""
        if self.gpus_seen or self.all_processes:
            return f"{sum(1 for process in self._gpu_processes if process.gpu_indices)} on GPU"
        return NO_GPU_LIVE if self.control.live else NO_GPU_REPLAY

    def _update_title(self) -> None:
        arrow = "▼" if self.sort_descending else "▲"
        title = f"Processes · {self._gpu_count_text()} · sort {SORT_COLUMNS[self.sort_column].label} {arrow} (s, S)"
        if self.all_processes:
            title += " · all processes (v)"
        if self.filter_text:
            title += f" · filter {printable(self.filter_text)!r} (/, Esc clears)"
        if self.border_title != title:
            self.border_title = title
