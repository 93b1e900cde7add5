"""The job pane: where an attached training job's step time goes (data wait, GPU, the rest) over time, its
throughput, MFU and energy per sample, torch memory, DataLoader and precision settings, per-rank step times; or the
py-spy estimate."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rich.text import Text

from gpumon import units
from gpumon.advisor.efficiency import EnergyLog, PowerSpan, job_mfu, view_joules_per_sample
from gpumon.jobs.job_view import JobView
from gpumon.jobs.jobstate import HookedView, RankSummary, TimelinePoint
from gpumon.jobs.pyspy.categories import CATEGORIES, LABELS, METHOD_LABEL
from gpumon.jobs.pyspy.estimate import EstimateView
from gpumon.jobs.step_model import (
    ALLOC,
    COMM,
    CPU,
    CPU_OPTIMIZER,
    D2H,
    DATA,
    GC,
    GPU_BUSY,
    H2D,
    LAUNCH,
    OTHER,
    OWNERS,
    RECENT_S,
    SHORT_LABELS,
    SYNC_IDLE,
    SYNC_WAIT,
    recent_step_model,
    shown_shares,
)
from gpumon.printable import printable, printable_or
from gpumon.tui.bar import bar
from gpumon.tui.format import plural
from gpumon.tui.pane import Pane
from gpumon.tui.sparkline import spark_string, window_maximum
from gpumon.units import MISSING

LABEL_WIDTH = 8
SHARES = (("data", "Data", "yellow"), ("gpu", "GPU", "green"), ("rest", "Rest", "magenta"))
BUDGET_PARTS = (
    ("data_worker", "load", "yellow"),
    ("data_collate", "collate", "bright_yellow"),
    ("h2d", "H2D", "cyan"),
    ("d2h", "D2H", "bright_cyan"),
    ("sync_wait", "sync", "red"),
    ("rest", "py", "magenta"),
)
"""The step time budget's parts (attribute of BudgetShares, label, colour), in the order of its bar."""
SAID_WHEN_PRESENT = frozenset({"d2h"})
"""Parts named in the legend only where the step has some."""
OWNER_STYLES = {
    GPU_BUSY: "green",
    DATA: "yellow",
    H2D: "cyan",
    SYNC_WAIT: "red",
    SYNC_IDLE: "bright_red",
    COMM: "bright_magenta",
    LAUNCH: "blue",
    CPU: "magenta",
    D2H: "bright_cyan",
    GC: "bright_yellow",
    ALLOC: "bright_blue",
    CPU_OPTIMIZER: "bright_green",
    OTHER: "bright_black",
}
"""The step model's owners' colours."""
"""The step-time shares: attribute of Breakdown, label, colour."""
CATEGORY_STYLES = {
    "data_wait": "yellow",
    "cuda_sync": "red",
    "forward": "green",
    "backward": "cyan",
    "optimizer": "blue",
    "comm": "bright_magenta",
    "h2d": "bright_cyan",
    "alloc": "bright_blue",
    "user_code": "magenta",
    "elsewhere": "bright_black",
}
END_REASONS = {"exit": "the process exited", "uninstall": "the hook was uninstalled"}
"""The hook's bye reasons, in words."""
SILENT_AFTER_S = 5.0
"""A live job that has sent nothing for this long is called silent."""


def _label(name: str) -> Text:
    return Text(name.ljust(LABEL_WIDTH), style="bold", no_wrap=True, end="")


def stacked_bar(shares: Sequence[tuple[float | None, str]], width: int) -> Text:
    """One bar `width` cells wide split between shares (0-1) in their styles; the unfilled rest dim."""
    text = Text(no_wrap=True, end="")
    used = 0
    total = 0.0
    for share, style in shares:
        if share is None:
            continue
        total += share
        cells = min(width - used, round(total * width) - used)
        if cells > 0:
            text.append("█" * cells, style=style)
            used += cells
    text.append("·" * (width - used), style="bright_black")
    return text


# ---------------------------------------------------------------------------------------------
# A hooked job.


def status_line(view: HookedView) -> Text | None:
    """Waiting, ended or silent: the one thing to say before the numbers (None when all is well)."""
    if view.waiting and not view.connected and not view.ended:
        return Text(printable(view.waiting) + " …", style="bold yellow", no_wrap=True, end="")
    if view.ended:
        text = Text("job ended", style="bold white on red", no_wrap=True, end="")
        reason = END_REASONS.get(view.end_reason or "", printable(view.end_reason or "connection closed"))
        details = reason if view.exit_code is None else f"{reason} · exit status {view.exit_code}"
        text.append(f" {details} · history kept", style="bold")
        return text
    if view.silent_s is not None and view.silent_s > SILENT_AFTER_S:
        return Text(
            f"no data from the job for {view.silent_s:.0f} s (stopped? stuck?)",
            style="bold yellow",
            no_wrap=True,
            end="",
        )
    if not view.steps:
        return Text("connected · waiting for the first training step", style="yellow", no_wrap=True, end="")
    return None


def step_line(view: HookedView, width: int) -> Text:
    """'Step    ████████▒▒▒▒···  data 52% GPU 30% rest 18%  13.0 ms': the latest window's breakdown."""
    breakdown = view.stats.breakdown
    text = _label("Step")
    timed = breakdown.gpu is not None
    legend = Text(no_wrap=True, end="")
    legend.append(f" data {units.share(breakdown.data)}", style="yellow")
    if timed:
        legend.append(f" GPU {units.share(breakdown.gpu)}", style="green")
        legend.append(f" rest {units.share(breakdown.rest)}", style="magenta")
    else:
        legend.append(f" other {units.share(breakdown.rest)}", style="magenta")
        legend.append(" (no GPU timing)", style="bright_black")
    legend.append(f"  {units.milliseconds(view.stats.wall_ms)}/step")
    bar_width = max(8, min(40, width - LABEL_WIDTH - legend.cell_len - 1))
    text.append_text(
        stacked_bar([(breakdown.data, "yellow"), (breakdown.gpu, "green"), (breakdown.rest, "magenta")], bar_width)
    )
    text.append_text(legend)
    return text


def budget_line(view: HookedView, width: int) -> Text | None:
    """'Budget  ███▒▒▒▒░░·  load 5% collate 41% H2D 47% (pageable 3.3 GB/s) sync 0% py 7% · GPU 6%': the
    budgeted steps' host time by part, the GPU's busy share beside it. None before the first budgeted step."""
    budget = view.budget
    if not budget.steps:
        return None
    legend = Text(no_wrap=True, end="")
    for attribute, label, style in BUDGET_PARTS:
        share = getattr(budget, attribute)
        if attribute in SAID_WHEN_PRESENT and not share:
            continue
        legend.append(f" {label} {units.share(share)}", style=style)
        if attribute == "h2d" and budget.h2d_rate is not None:
            pinned = "pageable" if (budget.pageable or 0.0) >= 0.5 else "pinned"
            legend.append(f" ({pinned} {units.rate(budget.h2d_rate)})", style=style)
    if budget.gpu is not None:
        legend.append(f" · GPU {units.share(budget.gpu)}", style="green")
    text = _label("Budget")
    bar_width = max(8, min(40, width - LABEL_WIDTH - legend.cell_len - 1))
    parts = [(getattr(budget, attribute), style) for attribute, _name, style in BUDGET_PARTS]
    text.append_text(stacked_bar(parts, bar_width))
    text.append_text(legend)
    return text


def step_model_line(view: HookedView, width: int, nvml_busy: float | None = None) -> Text | None:
    """'Time    ████████▒▒··  GPU 74% | post-sync 24% | launch 2%': the step model of the last 10 s, each owner in
    its colour (GPU busy from `nvml_busy`, GPU-Util 0-1, else the training stream). None without one."""
    model = recent_step_model(view.host_profiles, nvml_busy=nvml_busy)
    if model is None:
        return None
    legend = Text(no_wrap=True, end="")
    for index, (owner, share) in enumerate(shown_shares(model.shares)):
        if index:
            legend.append(" |", style="bright_black")
        legend.append(f" {SHORT_LABELS[owner]} {units.share(share)}", style=OWNER_STYLES[owner])
    text = _label("Time")
    bar_width = max(8, min(40, width - LABEL_WIDTH - legend.cell_len - 1))
    text.append_text(stacked_bar([(model.shares.get(owner), OWNER_STYLES[owner]) for owner in OWNERS], bar_width))
    text.append_text(legend)
    return text


def share_history(timeline: Sequence[TimelinePoint], attribute: str) -> list[float | None]:
    """A share over time in percent (None for seconds without steps)."""
    values: list[float | None] = []
    for point in timeline:
        share = getattr(point.breakdown, attribute)
        values.append(None if share is None else share * 100)
    return values


def share_lines(view: HookedView, width: int, compact: bool) -> list[Text]:
    """Sparklines of each share over time on a fixed 0-100% scale: one line each, or all three on one line."""
    shares = [
        (attr, label, style)
        for attr, label, style in SHARES
        if attr != "gpu" or any(p.breakdown.gpu is not None for p in view.timeline)
    ]
    breakdown = view.stats.breakdown
    if compact:
        cell = max(4, (width - LABEL_WIDTH) // len(shares) - len(" rest 100% "))
        text = _label("Shares")
        for attr, label, style in shares:
            text.append(f"{label.lower()} ", style=style)
            text.append(spark_string(share_history(view.timeline, attr), cell), style=style)
            text.append(f" {units.share(getattr(breakdown, attr)).rjust(4)}  ")
        return [text]
    lines = []
    for attr, label, style in shares:
        spark_width = max(0, width - LABEL_WIDTH - 6)
        text = _label(label if attr != "rest" or breakdown.gpu is not None else "Other")
        text.append(units.share(getattr(breakdown, attr)).rjust(4) + "  ", style=style)
        text.append(spark_string(share_history(view.timeline, attr), spark_width), style=style)
        lines.append(text)
    return lines


def rate_line(view: HookedView, width: int) -> Text:
    """'Rate    77 steps/s · 614 samples/s  ▁▂▃▅▇': throughput with its history (scaled to the window's peak)."""
    stats = view.stats
    text = _label("Rate")
    text.append(f"{units.count(stats.steps_per_s, fine=True)} steps/s", style="bold")
    use_samples = stats.samples_per_s is not None
    if use_samples:
        text.append(f" · {units.count(stats.samples_per_s, fine=True)} samples/s", style="bold")
    spark_width = max(0, width - text.cell_len - 2)
    values = [p.samples_per_s if use_samples else p.steps_per_s for p in view.timeline][-spark_width:]
    if spark_width:
        text.append("  ")
        text.append(spark_string(values, spark_width, maximum=window_maximum(values) or 1.0), style="cyan")
    return text


def memory_line(view: HookedView) -> Text:
    text = _label("Memory")
    memory = view.memory
    if memory is None:
        text.append("N/A (the job has not initialized CUDA)", style="bright_black")
        return text
    total = memory.get("total")
    allocated, reserved, peak = (
        units.size(value, compact=True)
        for value in (memory.get("allocated"), memory.get("reserved"), memory.get("max_allocated"))
    )
    text.append(f"alloc {allocated} · reserved {reserved} · peak {peak}")
    if total:
        text.append(f" of {units.size(total, compact=True)}")
    retries, ooms = memory.get("alloc_retries", 0), memory.get("ooms", 0)
    text.append(f" · retries {retries}", style="bold yellow" if retries else "")
    text.append(f" · OOMs {ooms}", style="bold white on red" if ooms else "")
    return text


def flop_rate(value: float | None) -> str:
    """FLOP/s with an SI prefix: 4.05e14 -> '405 TFLOP/s'."""
    text = units.count(value)
    return f"{text[:-1]} {text[-1]}FLOP/s" if text[-1:].isalpha() else f"{text} FLOP/s"


def joules(value: float | None) -> str:
    """Joules per sample: '2.31 J', '0.0123 J', '1,234 J'."""
    if not units.finite(value):
        return MISSING
    assert value is not None
    return f"{units.amount(value)} J" if value >= 100 else f"{value:.3g} J"


def efficiency_line(view: HookedView, power: PowerSpan | None) -> Text:
    """'Effic.  MFU 41% (405 TFLOP/s of H200 bf16 989 TFLOP/s, spec-sheet dense peak) · 2.31 J/sample (612 W)'."""
    text = _label("Effic.")
    reading = job_mfu(view)
    if reading.value is not None:
        text.append(f"MFU {units.percent(reading.value * 100, fine=True)}", style="bold")
        text.append(
            f" ({flop_rate(reading.achieved)} of {reading.gpu} {reading.precision} {flop_rate(reading.peak)},"
            " spec-sheet dense peak)"
        )
    else:
        text.append("MFU N/A", style="bright_black")
        if reading.achieved is not None:
            text.append(f" ({flop_rate(reading.achieved)}; {printable(reading.reason)})", style="bright_black")
        else:
            text.append(f" ({printable(reading.reason)})", style="bright_black")
    per_sample = view_joules_per_sample(view, power)
    if per_sample is not None and power is not None:
        text.append(f" · {joules(per_sample)}/sample", style="bold")
        source = "" if power.source == "energy counter" else f", {power.source}"
        text.append(f" ({units.amount(power.watts)} W{source})")
    elif power is None:
        text.append(" · J/sample N/A (no energy reading yet)", style="bright_black")
    else:
        text.append(" · J/sample N/A (samples per step unknown)", style="bright_black")
    return text


def _on_off(value: Any) -> str:
    return "on" if value else "off"


def loader_line(view: HookedView) -> Text:
    text = _label("Loader")
    loaders = view.dataloaders
    if not loaders:
        text.append("no DataLoader seen", style="bright_black")
        return text
    loader = loaders[0]
    prefetch = loader.get("prefetch_factor")
    batch, workers = (printable_or(loader.get(key), MISSING) for key in ("batch_size", "num_workers"))
    text.append(
        f"{printable_or(loader.get('dataset'))} · batch {batch} · workers {workers} · "
        f"prefetch {printable_or(prefetch, MISSING)} · "
        f"pin {_on_off(loader.get('pin_memory'))} · persist {_on_off(loader.get('persistent_workers'))}"
    )
    if len(loaders) > 1:
        text.append(f" (+{len(loaders) - 1} more)", style="bright_black")
    return text


def precision_line(view: HookedView) -> Text:
    text = _label("Math")
    precision = view.precision
    if not precision:
        text.append(MISSING, style="bright_black")
        return text
    autocast = precision.get("autocast")
    if autocast and autocast.get("enabled"):
        dtype = printable_or(autocast.get("dtype"), "").replace("torch.", "")
        text.append(f"AMP {dtype} ({printable_or(autocast.get('device_type'))})", style="green")
    else:
        text.append("AMP off", style="yellow")
    text.append(
        f" · TF32 matmul {_on_off(precision.get('tf32_matmul'))} · TF32 cuDNN "
        f"{_on_off(precision.get('tf32_cudnn'))} · cudnn.benchmark {_on_off(precision.get('cudnn_benchmark'))}"
    )
    return text


def _budget_text(rank: RankSummary) -> str:
    """The straggler's own budget: 'data 35% · GPU 40% · rest 25%' of its step."""
    parts = (("data", rank.breakdown.data), ("GPU", rank.breakdown.gpu), ("rest", rank.breakdown.rest))
    return " · ".join(f"{label} {round(100 * share)}%" for label, share in parts if share is not None)


def rank_lines(ranks: Sequence[RankSummary], straggler: int | None, width: int) -> list[Text]:
    """'Ranks   r0 13.0 ms  r1 41.2 ms ◀ straggler (data 35% · GPU 40% · rest 25%)': per-rank mean step time, the
    straggler highlighted with its own budget."""
    cells: list[Text] = []
    for rank in ranks:
        name = f"r{rank.rank}" if rank.rank is not None else f"pid {rank.pid}"
        cell = Text(no_wrap=True, end="")
        if rank.pid == straggler:
            cell.append(f"{name} {units.milliseconds(rank.wall_ms)} ◀ straggler", style="bold white on red")
        else:
            cell.append(f"{name} {units.milliseconds(rank.wall_ms)}", style="bright_black" if rank.ended else "")
        if rank.pid == straggler and rank.breakdown.data is not None:
            cell.append(f" ({_budget_text(rank)})", style="yellow")
        elif rank.data_ms:
            cell.append(f" (data {units.milliseconds(rank.data_ms)})", style="yellow")
        cells.append(cell)
    lines: list[Text] = []
    line = _label("Ranks")
    for cell in cells:
        if line.cell_len + cell.cell_len + 2 > width and line.cell_len > LABEL_WIDTH:
            lines.append(line)
            line = _label("")
        line.append_text(cell)
        line.append("  ")
    lines.append(line)
    return lines


def hooked_lines(
    view: HookedView, width: int, max_lines: int, power: PowerSpan | None = None, gpu_busy: float | None = None
) -> list[Text]:
    lines: list[Text] = []
    status = status_line(view)
    if status is not None:
        lines.append(status)
    if not view.steps:
        if view.info is not None:
            lines.append(loader_line(view))
        return lines[:max_lines]
    ranks = rank_lines(view.ranks, view.straggler, width) if view.ranks else []
    budget = budget_line(view, width)
    model = step_model_line(view, width, nvml_busy=gpu_busy)
    step = [step_line(view, width), *(line for line in (budget, model) if line is not None)]
    rate = rate_line(view, width)
    details = [memory_line(view), loader_line(view), precision_line(view)]
    if view.cuda.get("initialized"):
        details.insert(0, efficiency_line(view, power))
    room = max_lines - len(lines) - len(step) - 1 - len(ranks)
    full_shares = share_lines(view, width, compact=False)
    shares = full_shares if room - len(full_shares) >= len(details) else share_lines(view, width, compact=True)
    lines += [*step, *shares, rate, *ranks, *details]
    return lines[: max(1, max_lines)]


# ---------------------------------------------------------------------------------------------
# A job without the hook: the py-spy estimate.


def estimate_lines(view: EstimateView, width: int, max_lines: int) -> list[Text]:
    lines: list[Text] = []
    head = Text(METHOD_LABEL, style="bold yellow", no_wrap=True, end="")
    head.append(f" · {view.samples:,} main-thread samples at {view.rate} Hz in {view.rounds * view.round_s} s")
    lines.append(head)
    if view.ended:
        lines.append(
            Text(
                f"sampling ended: {printable_or(view.end_reason)} · estimate kept",
                style="bold white on red",
                no_wrap=True,
                end="",
            )
        )
    if not view.samples:
        lines.append(Text("waiting for py-spy's first samples …", style="yellow", no_wrap=True, end=""))
        return lines[:max_lines]
    recent = view.recent_fractions if view.recent_samples else view.fractions
    name_width = max(len(LABELS[c]) for c in CATEGORIES) + 1
    bar_width = max(6, min(25, width // 4))
    for category in CATEGORIES:
        style = CATEGORY_STYLES[category]
        text = Text(
            LABELS[category].ljust(name_width), no_wrap=True, end="", style="bold" if category == view.dominant else ""
        )
        text.append_text(bar(recent[category] * 100, bar_width, style))
        text.append(f" {recent[category] * 100:3.0f}% ")
        spark_width = max(0, width - text.cell_len)
        history = [fractions.get(category, 0.0) * 100 for fractions in view.timeline]
        text.append(spark_string(history, spark_width), style=style)
        lines.append(text)
    dominant = view.dominant
    if dominant is not None and view.hot_frames.get(dominant):
        hot = Text("most in ", style="bright_black", no_wrap=True, end="")
        hot.append(printable(view.hot_frames[dominant]))
        lines.append(hot)
    return lines[: max(1, max_lines)]


# ---------------------------------------------------------------------------------------------


def short_command(command: str, limit: int = 60) -> str:
    """The command, made printable, with its leading absolute paths cut to their names: 'python train.py --lr 3e-4'."""
    words = printable(command).split(" ")
    for index, word in enumerate(words[:2]):
        if word.startswith("/"):
            words[index] = os.path.basename(word)
    text = " ".join(words)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def job_title(view: JobView) -> str:
    """'Job 1234 · python train.py · optimizer steps' (the estimate and the end are said in the title too)."""
    command = short_command(view.command)
    parts = [f"Job {view.pid}"]
    if command:
        parts.append(command)
    if isinstance(view, EstimateView):
        parts.append(METHOD_LABEL)
    else:
        if view.ranks:
            parts.append(plural(len(view.ranks), "rank"))
        if view.step_source:
            parts.append(f"{view.step_source} steps")
    if view.ended:
        parts.append("ENDED")
    return " · ".join(parts)


def job_lines(
    view: JobView, width: int, max_lines: int, power: PowerSpan | None = None, gpu_busy: float | None = None
) -> list[Text]:
    if isinstance(view, EstimateView):
        return estimate_lines(view, width, max_lines)
    return hooked_lines(view, width, max_lines, power, gpu_busy)


class JobPane(Pane):
    """The attached job: step-time breakdown over time, throughput, memory, loader, precision, ranks; or the
    py-spy estimate for a job without the hook. Fed HookedView / EstimateView copies; never touches a socket."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.max_lines = 10
        """Most lines the pane may take; the app sets it from the terminal height."""
        self.view: JobView | None = None
        self.border_title = "Job"
        self.energy = EnergyLog()
        """The GPUs' energy readings (the app adds each snapshot), for the job's joules per sample."""

    def show(self, view: JobView) -> None:
        self.view = view
        title = job_title(view)
        self.set_title(title)
        max_lines = self.max_lines
        power = None
        busy = None
        if isinstance(view, HookedView):
            # The primary rank's GPUs: its samples are the ones the view counts.
            uuids = self.energy.gpus_of(view.pid) or view.device_uuids
            power = self.energy.power(uuids)
            busy = self.energy.utilization(uuids, RECENT_S)
        self.show_lines(lambda width: job_lines(view, width, max_lines, power, busy))
