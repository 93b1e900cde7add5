"""Command palette provider: the dashboard's actions (pause, interval, sort, filter, signals, help, quit) by name."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from gpumon.tui.process_table import SORT_COLUMNS, ProcessTable

if TYPE_CHECKING:
    from gpumon.tui.app import GpumonApp


class GpumonCommands(Provider):
    """Offers the same actions as the keys, so they can be found by typing."""

    def commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = cast("GpumonApp", self.app)
        table = app.query_one(ProcessTable)
        entries: list[tuple[str, Callable[[], object], str]] = [
            ("Pause / resume sampling", app.action_toggle_pause, "p: freeze or unfreeze the dashboard"),
            ("Faster: shorter interval", app.action_faster, "+: sample more often (replay: play faster)"),
            ("Slower: longer interval", app.action_slower, "-: sample less often (replay: play slower)"),
            ("Reverse process sort order", app.action_reverse_sort, "S: biggest first / smallest first"),
            ("GPU graph style: braille / blocks", app.action_toggle_graph_style, "t: braille dots or block characters"),
            ("CPU and memory graphs: show / hide", app.action_toggle_host_graphs, "h: beside the GPU graphs"),
            ("Filter processes", table.action_open_filter, "/: by command line, user or pid; Esc clears"),
            ("All processes / GPU processes only", table.action_toggle_all_processes, "v: every process as trees"),
            ("Interrupt process or job (SIGINT)", partial(table.action_signal, "SIGINT"), "I: after a confirm"),
            ("Terminate process or job (SIGTERM)", partial(table.action_signal, "SIGTERM"), "T: after a confirm"),
            ("Kill process or job (SIGKILL)", partial(table.action_signal, "SIGKILL"), "K: after a confirm"),
            ("Profile the job (torch.profiler)", app.action_capture_profile, "c: trace the next steps, summarize"),
            ("Help: keys and fields", app.action_help, "?: what each pane and field means"),
            ("Quit gpumon", app.action_quit, "q"),
        ]
        for key, column in SORT_COLUMNS.items():
            entries.append((f"Sort processes by {column.label}", partial(app.sort_processes_by, key), "s cycles"))
        return entries

    async def discover(self) -> Hits:
        for name, callback, help_text in self.commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self.commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, text=name, help=help_text)
