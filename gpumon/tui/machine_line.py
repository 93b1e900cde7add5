"""The host in one line, for a short terminal whose room goes to the job pane: CPU, load, iowait, memory, disks."""

from __future__ import annotations

from rich.text import Text

from gpumon import units
from gpumon.sampling.snapshot import Snapshot
from gpumon.tui.pane import LinesWidget

IOWAIT_WARNING = 10.0
"""iowait percent from which it is highlighted (as in the CPU pane)."""


def machine_line(snapshot: Snapshot) -> Text:
    """'CPU 30% load 6.0 iowait 0% mem 1.6G/126G disk R 1.0M/s W 0B/s': the CPU and disk panes at a glance."""
    cpu = snapshot.cpu
    text = Text(no_wrap=True, end="")
    text.append("CPU ", style="bold")
    text.append(units.percent(cpu.total))
    if cpu.load:
        text.append(f"  load {cpu.load[0]:.1f}")
    text.append("  iowait ")
    text.append(units.percent(cpu.iowait), style="bold yellow" if (cpu.iowait or 0) >= IOWAIT_WARNING else "")
    text.append(f"  mem {units.size(cpu.memory_used, compact=True)}/{units.size(cpu.memory_total, compact=True)}")
    if snapshot.disks:
        read = sum(disk.read_bytes_per_s or 0.0 for disk in snapshot.disks)
        write = sum(disk.write_bytes_per_s or 0.0 for disk in snapshot.disks)
        text.append("  Disk ", style="bold")
        text.append(f"R {units.rate(read, compact=True, binary=True)} W {units.rate(write, compact=True, binary=True)}")
    return text


class MachineLine(LinesWidget):
    """Shown instead of the CPU and disk panes where a job takes their room (a short, narrow terminal)."""

    DEFAULT_CSS = """
    MachineLine {
        height: auto;
        padding: 0;
    }
    """

    def show(self, snapshot: Snapshot) -> None:
        self.show_lines(lambda width: [machine_line(snapshot)])
