"""One key table (gpumon.tui.keys): every key in it is bound where it applies, in the help and in the palette when it
has a palette title; every binding of the dashboard, the advisor's app and the process table is in it."""

from __future__ import annotations

from textual.binding import Binding

from gpumon.tui.advisor_app import AdvisorApp
from gpumon.tui.app import GpumonApp
from gpumon.tui.keys import KEYS, Where, help_lines, palette_keys
from gpumon.tui.process_table import ProcessTable

NOT_DESCRIBED = {("escape", "clear_filter")}
"""The filter line's Esc: told in the `/` key's line, not a key of its own."""
NO_HELP_LINE = {"ctrl+c"}
"""The advisor's ctrl+c quits as q does (and stops what it started): no line of its own."""


def _bound(bindings: object) -> set[tuple[str, str]]:
    assert isinstance(bindings, list)
    return {(binding.key, binding.action) for binding in bindings if isinstance(binding, Binding)}


def _table(*where: Where) -> set[tuple[str, str]]:
    return {(key.key, key.action) for key in KEYS if key.where in where}


def test_each_app_binds_exactly_the_keys_the_table_gives_it() -> None:
    assert _bound(GpumonApp.BINDINGS) == _table(Where.DASHBOARD, Where.PLAIN)
    assert _bound(AdvisorApp.BINDINGS) == _table(Where.DASHBOARD, Where.ADVISOR)
    assert _bound(ProcessTable.BINDINGS) - NOT_DESCRIBED == _table(Where.PROCESSES)


def test_every_key_has_a_help_line_and_every_help_line_is_shown_somewhere() -> None:
    shown = set(help_lines(job=True, advisor=True)) | set(help_lines(job=True, advisor=False))
    for key in KEYS:
        if key.key in NO_HELP_LINE:
            continue
        assert key.help is not None, key
        assert key.help in shown, key


def test_the_palette_runs_actions_that_exist() -> None:
    titles = [key.palette for key in palette_keys()]
    assert len(titles) == len(set(titles))
    assert [key.palette_place for key in palette_keys()] == list(range(1, len(titles) + 1))
    for key in palette_keys():
        owner = ProcessTable if key.where is Where.PROCESSES else GpumonApp
        assert hasattr(owner, "action_" + key.action.split("(")[0]), key
    assert not [key for key in palette_keys() if key.where is Where.TEXTUAL]


def test_the_keys_textual_binds_are_only_help_lines() -> None:
    for key in KEYS:
        if key.where is Where.TEXTUAL:
            assert not key.key and not key.palette, key
