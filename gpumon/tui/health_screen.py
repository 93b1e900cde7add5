"""The health detail (`e`): every GPU's health figures in full, where the dashboard has room only for a badge."""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpumon.sampling.snapshot import Snapshot
from gpumon.tui.format import short_gpu_name
from gpumon.tui.gpu_health import health_badge, health_detail_lines, no_gpu_line
from gpumon.tui.panel_screen import PanelScreen


def detail_text(snapshot: Snapshot | None) -> Text:
    """Each GPU's name and badge, then its health figures one to a line; without GPUs, why (the GPU pane's line)."""
    if snapshot is None:
        return Text("no GPU sample yet", style="bright_black")
    missing = no_gpu_line(snapshot)
    if missing is not None and not snapshot.gpus:
        return missing
    lines: list[Text] = []
    for gpu in snapshot.gpus:
        head = Text(f"GPU{gpu.index} {short_gpu_name(gpu.name)}  ", style="bold", end="")
        head.append_text(health_badge(gpu))
        lines += [head, *health_detail_lines(gpu), Text("")]
    return Text("\n").join(lines[:-1])


class HealthScreen(PanelScreen):
    """The health of every GPU as the newest snapshot read it; escape, q or e closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,e", "close", "Close", id="health.close", tooltip="Back to the dashboard"),
    ]

    def __init__(self, snapshot: Snapshot | None) -> None:
        super().__init__()
        self.snapshot = snapshot

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            when = time.strftime("%H:%M:%S", time.localtime(self.snapshot.timestamp)) if self.snapshot else ""
            scroll.border_title = f"GPU health {when}".strip()
            scroll.border_subtitle = "escape closes"
            yield Static(detail_text(self.snapshot), id="health-detail")
