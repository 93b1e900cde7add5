"""The advisor side panel: the finding and its evidence, the experiments to try, a progress bar while one runs,
the results table (filled row by row, never cleared mid-run) and the code change for the winner.

It only shows what it is given: the app's advisor controller posts findings and guided-run events from its
threads, and the app hands them to these methods on the UI thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import ProgressBar, Static

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.categories import HEALTHY
from gpumon.advisor.measure import MIN_WINDOW_STEPS, speedup
from gpumon.advisor.report import (
    energy_note,
    joules_cell,
    memory_cell,
    mfu_cell,
    percent_cell,
    rate_cell,
    with_note,
)
from gpumon.advisor.results import OK, GuidedReport, VariantResult
from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import SOURCE_HOOK, Signals
from gpumon.printable import printable
from gpumon.tui.printable_text import printable_text

FIGURES = (
    ("GPU-Util", 8),
    ("SM", 5),
    ("samples/s", 9),
    ("speed-up", 8),
    ("noise", 6),
    ("peak mem", 8),
    ("MFU", 5),
    ("J/sample", 8),
)
"""The figure columns of a result, with their widths: as many to a line as the panel's width holds, the next line
for the rest, so every column shows from 120 terminal columns up."""
CATEGORY_STYLES = {HEALTHY: "bold green"}
OUTCOME_STYLES = {"kept": "bold green", "inconclusive": "bold yellow", "baseline": "bold"}
IDLE_HINT = "g: guided run · a: hide this panel"
MEASURING_STEPS = MIN_WINDOW_STEPS
"""Steps a diagnosis window holds before the panel shows its finding rather than "measuring"."""


def figure_groups(width: int) -> list[list[int]]:
    """The FIGURES columns, by index, packed into lines of at most `width` cells (one space between columns)."""
    groups: list[list[int]] = [[]]
    used = 0
    for index, (_name, cells) in enumerate(FIGURES):
        need = cells + (1 if groups[-1] else 0)
        if groups[-1] and used + need > width:
            groups.append([])
            used, need = 0, cells
        groups[-1].append(index)
        used += need
    return groups


def figure_cells(result: VariantResult, baseline: VariantResult | None) -> list[str]:
    """A row's figures in FIGURES order ('-' where there is none)."""
    m = result.measurement
    if result.status != OK or m is None or not m.rates:
        return ["-"] * len(FIGURES)
    base = baseline.measurement if baseline is not None else None
    gain = speedup(m, base)
    return [
        percent_cell(m.gpu_util),
        percent_cell(m.sm_activity),
        rate_cell(m.rate),
        f"{gain:.1f}x" if gain is not None else "-",
        f"±{m.noise * 100:.0f}%",
        memory_cell(m.peak_memory),
        mfu_cell(m.mfu),
        joules_cell(m.joules_per_sample),
    ]


def result_lines(rows: Sequence[VariantResult], width: int) -> Text:
    """The results as blocks of lines, one block a row: its step and outcome; its figures under the column names
    (on as many lines as `width` needs); and the reason on its own line (settled, the noise, rolled back, not in
    effect). The first row is the baseline the speed-ups are measured against."""
    text = Text(no_wrap=False, overflow="fold")
    if not rows:
        return text
    groups = figure_groups(width)
    units = {r.measurement.unit for r in rows if r.measurement is not None and r.measurement.rates}
    names = [name for name, _cells in FIGURES]
    names[2] = units.pop() if len(units) == 1 else names[2]
    for group in groups:
        line = " ".join(names[index].rjust(FIGURES[index][1]) for index in group)
        text.append(line + "\n", style="bold dim")
    baseline = rows[0]
    for number, row in enumerate(rows):
        is_baseline = number == 0
        word, reason = row.outcome(is_baseline)
        if row.flags and row.kept:
            reason = f"{reason}; {'; '.join(row.flags)}" if reason else "; ".join(row.flags)
        if not is_baseline and row.status == OK:
            reason = with_note(reason, energy_note(row.measurement, baseline.measurement))
        style = OUTCOME_STYLES.get(word, "bold red" if row.status != OK else "bold")
        label = printable(row.label)
        word = "" if word == label else word
        gap = max(1, width - len(label) - len(word))
        text.append(label, style="bold" if row.kept else "")
        text.append(" " * gap if len(label) + len(word) + 1 <= width else "\n  ")
        text.append(word + "\n", style=style)
        cells = figure_cells(row, baseline)
        for group in groups:
            line = " ".join(cells[index].rjust(FIGURES[index][1]) for index in group)
            text.append(line + "\n", style="green" if row.kept else "")
        if reason:
            text.append(f"  {printable(reason)}\n", style="dim")
    text.rstrip()
    return text


@dataclass(frozen=True)
class ResultsView:
    """The results laid out for the width the panel gives them (a Rich renderable: re-laid out on resize)."""

    rows: tuple[VariantResult, ...]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield result_lines(self.rows, options.max_width)


def has_no_data(finding: Finding, signals: Signals | None) -> bool:
    """Whether the finding stands on no data (the healthy rule's "not enough data" at confidence 0, or a hooked job
    with no step in the window: still starting), which the panel shows as "measuring" instead."""
    if finding.confidence <= 0:
        return True
    return signals is not None and signals.source == SOURCE_HOOK and not signals.step.steps


def measuring_text(signals: Signals | None) -> Text:
    """'Measuring: 1 of 3 steps': what the first verdict waits for."""
    steps = (signals.step.steps or 0) if signals is not None else 0
    text = Text()
    if steps < MEASURING_STEPS:
        text.append(f"Measuring: {steps} of {MEASURING_STEPS} steps\n", style="bold")
        text.append("no verdict until the job has run some steps (start-up, imports, the first batches)", style="dim")
    else:
        text.append("Measuring: no figures yet\n", style="bold")
        text.append("no verdict until the window holds step and GPU figures", style="dim")
    return text


def finding_text(finding: Finding) -> Text:
    """The finding's headline, evidence, confidence and secondaries, made printable."""
    text = Text()
    text.append(finding.headline + "\n", style=CATEGORY_STYLES.get(finding.category, "bold yellow"))
    text.append(finding.evidence + "\n")
    text.append(
        f"confidence {finding.confidence:.0%} · {finding.source or 'no job data'} · `{finding.category}`",
        style="dim",
    )
    for other in finding.secondary:
        text.append(f"\nalso {other.category}: ", style="bold")
        text.append(other.evidence, style="dim")
    return printable_text(text, multiline=True)


class AdvisorPanel(VerticalScroll):
    """The side panel. Methods are called on the UI thread."""

    DEFAULT_CSS = """
    AdvisorPanel {
        dock: right;
        width: 45%;
        min-width: 40;
        max-width: 80;
        height: 1fr;
        border-left: solid $primary;
        border-title-color: $text;
        border-title-style: bold;
        padding: 0 1;
    }
    AdvisorPanel.-hidden {
        display: none;
    }
    AdvisorPanel > Static {
        margin-bottom: 1;
    }
    AdvisorPanel #advisor-progress {
        display: none;
    }
    AdvisorPanel.-running #advisor-progress {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Advisor"
        self.finding: Finding | None = None
        self.results: list[VariantResult] = []
        self.report: GuidedReport | None = None
        self.measuring = False
        """The last finding stood on no data: "measuring" shows instead of it."""

    def compose(self) -> ComposeResult:
        yield Static("watching the job…", id="advisor-finding")
        yield Static("", id="advisor-plan")
        yield Static("", id="advisor-status")
        yield ProgressBar(total=1.0, show_eta=False, id="advisor-progress")
        yield Static("", id="advisor-results")
        yield Static("", id="advisor-code")
        yield Static(IDLE_HINT, id="advisor-hint")

    # -- the diagnosis ---------------------------------------------------------------------------

    def show_finding(self, finding: Finding, signals: Signals | None = None) -> None:
        """The finding, or "measuring" while it stands on no data (no step yet: confidence 0)."""
        self.measuring = has_no_data(finding, signals)
        if self.measuring:
            self.query_one("#advisor-finding", Static).update(measuring_text(signals))
            return
        self.finding = finding
        self.query_one("#advisor-finding", Static).update(finding_text(finding))

    def show_ended(self) -> None:
        """The job has ended: its last verdict stays, said to be its last; without one, why there is none."""
        if self.finding is not None:
            text = finding_text(self.finding)
            text.append("\nthe job has ended: the verdict above is the last one", style="bold dim")
        else:
            text = Text("The job has ended without a verdict\n", style="bold")
            text.append("it ran too few steps for one (start-up, imports, the first batches)", style="dim")
        self.measuring = False
        self.query_one("#advisor-finding", Static).update(text)

    def show_plan(self, experiments: Sequence[Experiment], skipped: Sequence[str] = ()) -> None:
        text = Text()
        if experiments:
            text.append("Experiments\n", style="bold")
            for number, experiment in enumerate(experiments, 1):
                kind = "live" if experiment.live else "trial run"
                text.append(f"{number}. {experiment.label}", style="")
                text.append(
                    f"  ({kind}{'; ' + '; '.join(experiment.flags) if experiment.flags else ''})\n", style="dim"
                )
        for line in skipped:
            text.append(f"not tried: {line}\n", style="dim")
        if not experiments and not skipped and self.results:
            text.append("No experiment left to try.", style="dim")
        self.query_one("#advisor-plan", Static).update(printable_text(text, multiline=True))

    # -- a running experiment --------------------------------------------------------------------

    def show_progress(self, message: str, fraction: float | None) -> None:
        self.set_class(fraction is not None, "-running")
        self.query_one("#advisor-status", Static).update(Text(printable(message), style="bold"))
        if fraction is not None:
            self.query_one("#advisor-progress", ProgressBar).update(total=1.0, progress=fraction)

    def add_result(self, result: VariantResult) -> None:
        """Append a row (the first one is the baseline the speed-ups are measured against)."""
        self.results.append(result)
        self._show_rows()

    def results_text(self) -> str:
        """The results as the panel lays them out at its present width, as plain text."""
        width = self.query_one("#advisor-results", Static).content_region.width
        return result_lines(self.results, max(1, width)).plain

    def _show_rows(self) -> None:
        self.query_one("#advisor-results", Static).update(ResultsView(tuple(self.results)))

    def show_report(self, report: GuidedReport) -> None:
        """The run's end: its rows, status line and verdict, all from `report` (so they cannot disagree)."""
        self.report = report
        self.results = list(report.rows)
        self._show_rows()
        self.set_class(False, "-running")
        status = Text()
        status.append("Guided run done: ", style="bold")
        status.append(report.verdict, style="bold green" if report.kept else "bold yellow")
        if report.stopped:
            status.append(f"\nstopped: {report.stopped}", style="dim")
        self.query_one("#advisor-status", Static).update(printable_text(status, multiline=True))
        code = Text()
        if report.kept:
            code.append("Code change\n", style="bold green")
            for line in report.code:
                code.append(f"  {line}\n", style="cyan")
        for offer in report.offers:
            code.append(f"Trial run: {offer.text()}\n", style="cyan")
        for line in report.advice:
            code.append(f"Also needs a code change: {line}\n", style="yellow")
        for variant in report.variants:
            for flag in variant.flags if variant.kept else ():
                code.append(f"Note ({variant.label}): {flag}\n", style="dim")
        self.query_one("#advisor-code", Static).update(printable_text(code, multiline=True))

    def start_run(self) -> None:
        """A new guided run: forget the previous table."""
        self.results = []
        self.report = None
        self._show_rows()
        self.query_one("#advisor-code", Static).update("")
        self.query_one("#advisor-hint", Static).update("g: stop the guided run · a: hide this panel")
        self.show_progress("starting the guided run…", 0.0)

    def end_run(self) -> None:
        self.set_class(False, "-running")
        self.query_one("#advisor-hint", Static).update(IDLE_HINT)
