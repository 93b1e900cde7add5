"""Every use of Textual's private API, behind one switch: on the Textual versions in CHECKED the workarounds are
imported and used; on any other only `public` (Textual's public API: slower, the same result) is.

The workarounds, each checked on every version in CHECKED (tests/tui/test_textual_fast_path.py compares what they
draw with what Textual draws, on the installed version):
    fast_path    plain panes drawn without StylesCache; cached lines handed back as they are (pane, cached_widgets)
    data_table   the process table's cells drawn and replaced without DataTable's per-row bookkeeping, and a
                 table in a plain box drawn as the panes are (fast_path)
    quiet_input  an input thread that sleeps until input (the app's driver)
    quiet_timer  a screen update timer that sleeps between frames (the default screen)
    precise_update  a frame sends only the changed cells of a line, not the line from its widget's left edge, and
                    asks the widgets only for the lines it sends
    lean_strip   the panes' Strips make their caches when first used (fewer objects for the garbage collector)
scripts/check_textual_range.sh runs tests/tui on the lowest and highest Textual that pyproject.toml allows.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import textual

from gpumon.tui._textual_compat.public import SegmentBuilder, StyleFinish, style_finish


def textual_version() -> str:
    """Textual's version, read from the name of the dist-info directory beside the package (`textual-8.2.8.dist-info`,
    as installers write it) without importing importlib.metadata, which `textual.__version__` does: 6 ms of the
    dashboard's start on a 2-core VM, and nothing else there needs it. importlib.metadata's answer where that
    directory is not found (an editable install) or is not alone."""
    prefix, suffix = "textual-", ".dist-info"
    site = os.path.dirname(os.path.dirname(textual.__file__ or ""))
    try:
        names = [
            entry.name for entry in os.scandir(site) if entry.name.startswith(prefix) and entry.name.endswith(suffix)
        ]
    except OSError:
        names = []
    return names[0][len(prefix) : -len(suffix)] if len(names) == 1 else textual.__version__


CHECKED = ("8.2.8",)
"""The Textual versions the private workarounds were read against and tested on (tests/tui on each)."""
ACTIVE = textual_version() in CHECKED
"""Whether the private workarounds are used: only with a Textual in CHECKED."""

if TYPE_CHECKING or ACTIVE:
    from gpumon.tui._textual_compat.data_table import FastCellTable as CellTable
    from gpumon.tui._textual_compat.fast_path import cached_lines, drawn_text, plain_box, render_plain_box
    from gpumon.tui._textual_compat.lean_strip import lean_strip
    from gpumon.tui._textual_compat.precise_update import send_changed_cells_only
    from gpumon.tui._textual_compat.quiet_input import driver_class
    from gpumon.tui._textual_compat.quiet_timer import update_timer
else:
    from gpumon.tui._textual_compat.public import PlainCellTable as CellTable
    from gpumon.tui._textual_compat.public import (
        cached_lines,
        drawn_text,
        driver_class,
        lean_strip,
        plain_box,
        send_changed_cells_only,
        update_timer,
    )

    def render_plain_box(*_args: object) -> None:
        raise AssertionError("plain_box() is False here: panes draw through Textual")


__all__ = [
    "ACTIVE",
    "CHECKED",
    "CellTable",
    "SegmentBuilder",
    "StyleFinish",
    "cached_lines",
    "drawn_text",
    "driver_class",
    "lean_strip",
    "plain_box",
    "render_plain_box",
    "send_changed_cells_only",
    "style_finish",
    "update_timer",
]
