"""The disk pane: per disk read and write rates with sparklines scaled to the window's peak, IOPS, and iowait."""

from __future__ import annotations

from rich.text import Span, Text

from gpumon import units
from gpumon.printable import printable
from gpumon.sampling.history import History
from gpumon.sampling.snapshot import DiskSample, Snapshot
from gpumon.tui._textual_compat import drawn_text
from gpumon.tui.pane import Pane
from gpumon.tui.sparkline import spark_string, window_maximum

RATE_WIDTH = 8
IOPS_WIDTH = 5
_NAME_MAX = 12
SCALE_FLOOR = 1024.0**2
"""The smallest top of a rate sparkline (1 MiB/s), so a disk doing a few KiB/s draws flat, not busy."""


def rate_sparkline(history: History, key: str, width: int) -> str:
    """Rates are not percentages: scale each sparkline from 0 to the largest rate in its window."""
    values = history.last(key, width)
    return spark_string(values, width, maximum=max(SCALE_FLOOR, window_maximum(values)))


def disk_line(disk: DiskSample, history: History, width: int, name_width: int) -> Text:
    """'nvme0n1  R  512M/s ▁▂▅▇  W   30M/s ▁▁▂  1.2k IOPS'."""
    fixed = name_width + 2 * (3 + RATE_WIDTH + 1) + 1 + IOPS_WIDTH + 5
    spark_width = max(0, (width - fixed) // 2)
    parts = [printable(disk.name)[:name_width].ljust(name_width)]
    spans = []
    offset = len(parts[0])
    for label, rate, key, style in (
        ("R", disk.read_bytes_per_s, f"disk.{disk.name}.read", "cyan"),
        ("W", disk.write_bytes_per_s, f"disk.{disk.name}.write", "magenta"),
    ):
        rate_text = f" {label} " + units.rate(rate, compact=True, binary=True).rjust(RATE_WIDTH) + " "
        spark = rate_sparkline(history, key, spark_width)
        if spark:
            spans.append(Span(offset + len(rate_text), offset + len(rate_text) + len(spark), style))
        parts += (rate_text, spark)
        offset += len(rate_text) + len(spark)
    parts.append(" " + units.count(disk.read_iops + disk.write_iops).rjust(IOPS_WIDTH) + " IOPS")
    return drawn_text("".join(parts), spans, "bold")  # a printable name and figures: nothing for Text to strip


def disk_lines(snapshot: Snapshot, history: History, width: int) -> list[Text]:
    if not snapshot.disks:
        return [Text("no disks reported", style="bright_black")]
    name_width = min(_NAME_MAX, max(len(printable(disk.name)) for disk in snapshot.disks))
    return [disk_line(disk, history, width, name_width) for disk in snapshot.disks]


class DiskPane(Pane):
    """Per disk: read and write bytes/s with history, IOPS; the CPU's iowait in the title."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Disk"

    def show(self, snapshot: Snapshot, history: History) -> None:
        title = f"Disk · iowait {units.percent(snapshot.cpu.iowait)}"
        self.set_title(title)
        self.show_lines(lambda width: disk_lines(snapshot, history, width))
