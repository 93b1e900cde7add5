"""The help screen: the keys (gpumon.tui.keys), and what each pane and field means."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpumon.tui.keys import help_lines
from gpumon.tui.panel_screen import PanelScreen

FIELDS = (
    (
        "GPU-Util",
        "GPU-Util counts time any kernel ran; SM activity counts how many SMs were busy. "
        "One small kernel on one SM all the time reads 100% GPU-Util.",
    ),
    ("SM act", "GPM SM activity: average fraction of SMs busy (Hopper and newer; hidden where the GPU has no GPM)."),
    ("Tensor", "GPM tensor activity: cycles any tensor-core pipe was active. Near 0% on fp32 math: try bf16 / TF32."),
    ("Mem", "device memory used / total; the bar is the percentage."),
    ("°C W MHz", "temperature, power draw / limit, SM clock / memory clock."),
    (
        "PCIe ↓ ↑",
        "host-to-device (rx) and device-to-host (tx) per second, in decimal units as NVLink's (1 GB/s = 10^9 B/s).",
    ),
    (
        "throttle",
        "clock-event reasons holding clocks back (power cap, thermal...), highlighted; idle is not a problem.",
    ),
    (
        "health ok",
        "each GPU's health badge; where something is wrong, what: XID (its code), ECC (uncorrected errors), remap "
        "FAILED or reset pending, PCIe x8/16 (a link trained narrower than it can be), thermal (clocks held by "
        "heat), MIG (its instances). e shows every figure.",
    ),
    ("sparklines", "percentages on a fixed 0-100% scale (▁ = 0, █ = 100); disk rates from 0 to the window's peak."),
    (
        "time axis",
        "under each GPU's graphs: the age of each quarter, now on the right; marks: ▴ a process started, ▾ one "
        "ended, ! clocks held back, X an XID error (the health line shows its code).",
    ),
    (
        "CPU",
        "total busy %, then each core (a bar or one block per core), load averages, memory and swap; on wide "
        "terminals (h hides them), CPU and memory history graphs (each dot column the mean of two samples, so "
        "they span twice the GPU graphs' time).",
    ),
    ("iowait", "CPU time spent waiting for disk I/O; high iowait with a hungry GPU points at the input pipeline."),
    ("Processes", "each GPU process with its child processes (DataLoader workers) beneath it (├─ └─)."),
    (
        "GPU-MEM SM%",
        "GPU memory held by the process (summed over its GPUs), and its SM share where NVML reports it "
        "(N/A otherwise); for a process on several GPUs, SM% is the mean over them, never above 100.",
    ),
    ("CPU% RSS", "percent of one core, and resident host memory."),
    ("STATE", "run, sleep, disk (waiting on I/O, highlighted), zomb..."),
    ("R/s W/s", "the process's disk read / write bytes per second (wide terminals)."),
    ("Disk", "read and write bytes/s per disk, IOPS (reads + writes per second)."),
)


JOB_FIELDS = (
    (
        "Job",
        "the attached training job: pid, command, how its steps are detected; ENDED once it is gone (the "
        "history stays).",
    ),
    (
        "Step",
        "the last 5 s of steps: time waiting for the DataLoader (data), GPU busy time that does not overlap "
        "the wait (GPU), and the rest: host time with the GPU idle (Python, launches, syncs). Without CUDA "
        "timing: data and other.",
    ),
    (
        "Budget",
        "where the host's time goes on budgeted steps (one in 16, at most four a second): the DataLoader's "
        "workers and collate, host->device copies (H2D), waiting in syncs, the rest of the Python step (py).",
    ),
    (
        "Time",
        "the step model over the last 10 s: GPU busy (GPU-Util), and the GPU's idle time by its owner: waiting "
        "for data, host->device copies, inside a sync, after syncs until new work arrives (post-sync), "
        "communication, torch launching the model's kernels (launch), the job's own CPU code (cpu). The shares "
        "add up to 100%; diagnose names the lines behind them.",
    ),
    ("Data GPU Rest", "each share of the step time per second, on a fixed 0-100% scale."),
    ("Rate", "steps/s and samples/s over the last 5 s; the sparkline is samples/s (or steps/s) per second."),
    ("Memory", "torch.cuda allocated / reserved / peak, allocator retries (memory pressure) and OOMs."),
    (
        "Loader",
        "the DataLoader's batch size, workers, prefetch, pin_memory, persistent_workers; its workers are "
        "magenta in the process table, the job bold magenta, its GPU's name highlighted.",
    ),
    ("Math", "autocast (AMP) dtype, TF32 for matmul and cuDNN, cudnn.benchmark."),
    ("Ranks", "per-rank mean step time of a distributed job; the rank holding the others back is the straggler."),
    (
        "estimate",
        "a job without the hook is sampled with py-spy: shares of the main thread's samples in each "
        "phase. An estimate, not a measurement.",
    ),
)


def help_table(title: str, rows: tuple[tuple[str, str], ...]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", show_header=False, box=None, expand=True)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(ratio=1)
    for name, meaning in rows:
        table.add_row(name, meaning)
    return table


class HelpScreen(PanelScreen):
    """Keys and the meaning of every pane and field; escape, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close help", id="help.close", tooltip="Back to the dashboard"),
    ]

    def __init__(self, job: bool = False, advisor: bool = False) -> None:
        super().__init__()
        self.job = job
        """Also explain the job pane and its key (when a job is attached or offered)."""
        self.advisor = advisor
        """Also list the advisor's keys (a, g)."""

    def compose(self) -> ComposeResult:
        keys = help_lines(job=self.job, advisor=self.advisor)
        fields: tuple[tuple[str, str], ...] = FIELDS + JOB_FIELDS if self.job else FIELDS
        with VerticalScroll() as scroll:
            scroll.border_title = "gpumon help"
            scroll.border_subtitle = "escape closes"
            yield Static(help_table("Keys", keys), id="help-keys")
            yield Static(Text(""))
            yield Static(help_table("Fields", fields), id="help-fields")
