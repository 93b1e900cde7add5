"""Command palette provider: the dashboard's keys by name (gpumon.tui.keys), and a sort by each column."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from gpumon.tui.keys import Where, palette_keys
from gpumon.tui.process_table import SORT_COLUMNS, ProcessTable


class GpumonCommands(Provider):
    """Offers the same actions as the keys, so they can be found by typing."""

    def commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        table = app.query_one(ProcessTable)
        entries: list[tuple[str, Callable[[], object], str]] = [
            (
                key.palette,
                partial(app.run_action, key.action, table if key.where is Where.PROCESSES else None),
                key.palette_help,
            )
            for key in palette_keys()
        ]
        for column_key, column in SORT_COLUMNS.items():
            entries.append((f"Sort processes by {column.label}", partial(table.sort_by, column_key), "s cycles"))
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
