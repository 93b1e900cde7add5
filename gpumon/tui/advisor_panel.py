"""The advisor side panel: the finding and its evidence, the experiments to try, a progress bar while one runs,
the results table (filled row by row, never cleared mid-run) and the code change for the winner.

It only shows what it is given: the app's advisor controller posts findings and guided-run events from its
threads, and the app hands them to these methods on the UI thread.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, ProgressBar, Static

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.categories import HEALTHY
from gpumon.advisor.measure import speedup
from gpumon.advisor.report import (
    energy_note,
    joules_cell,
    memory_cell,
    mfu_cell,
    percent_cell,
    rate_cell,
    result_text,
    with_note,
)
from gpumon.advisor.results import OK, GuidedReport, VariantResult
from gpumon.advisor.rules import Finding
from gpumon.printable import printable
from gpumon.tui.printable_text import printable_text

COLUMNS = (
    ("step", "step"),
    ("util", "GPU-Util"),
    ("sm", "SM"),
    ("rate", "samples/s"),
    ("gain", "speed-up"),
    ("mem", "peak mem"),
    ("mfu", "MFU"),
    ("joules", "J/sample"),
    ("result", "result"),
)
CATEGORY_STYLES = {HEALTHY: "bold green"}
IDLE_HINT = "g: guided run · a: hide this panel"


def short_result(result: VariantResult, is_baseline: bool) -> str:
    """The result column in the panel: a word or two; the reason follows failures."""
    if is_baseline and result.status == OK:
        return "baseline"
    if result.status == OK:
        return "kept" if result.kept else ("no win, rolled back" if result.kind == "live" else "no win")
    return result_text(result, is_baseline)


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
    AdvisorPanel DataTable {
        height: auto;
        max-height: 16;
        margin-bottom: 1;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Advisor"
        self.finding: Finding | None = None
        self.results: list[VariantResult] = []
        self.report: GuidedReport | None = None

    def compose(self) -> ComposeResult:
        yield Static("watching the job…", id="advisor-finding")
        yield Static("", id="advisor-plan")
        yield Static("", id="advisor-status")
        yield ProgressBar(total=1.0, show_eta=False, id="advisor-progress")
        table: DataTable[str] = DataTable(id="advisor-results", zebra_stripes=True, cursor_type="row")
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Static("", id="advisor-code")
        yield Static(IDLE_HINT, id="advisor-hint")

    # -- the diagnosis ---------------------------------------------------------------------------

    def show_finding(self, finding: Finding) -> None:
        self.finding = finding
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
        self.query_one("#advisor-finding", Static).update(printable_text(text, multiline=True))

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
        table = self.query_one("#advisor-results", DataTable)
        baseline = self.results[0].measurement
        m = result.measurement
        shown = result.status == OK and m is not None and bool(m.rates)
        gain = speedup(m, baseline) if shown else None
        style = "green" if result.kept else ("red" if result.status != OK else "")
        cells = [
            result.label,
            percent_cell(m.gpu_util) if shown and m else "-",
            percent_cell(m.sm_activity) if shown and m else "-",
            (rate_cell(m.rate) + (" " + m.unit.split("/")[0] if m.unit != "samples/s" else "")) if shown and m else "-",
            f"{gain:.1f}x" if gain is not None else "-",
            memory_cell(m.peak_memory) if shown and m else "-",
            mfu_cell(m.mfu) if shown and m else "-",
            joules_cell(m.joules_per_sample) if shown and m else "-",
            with_note(
                short_result(result, is_baseline=len(self.results) == 1),
                energy_note(m, baseline) if shown and len(self.results) > 1 else "",
            ),
        ]
        table.add_row(*[Text(printable(cell), style=style) for cell in cells], key=f"row-{len(self.results)}")

    def show_report(self, report: GuidedReport) -> None:
        self.report = report
        self.set_class(False, "-running")
        best = report.best
        gain = speedup(best.measurement, report.baseline.measurement)
        status = Text()
        status.append("Guided run done", style="bold")
        if report.stopped:
            status.append(f": {report.stopped}", style="dim")
        self.query_one("#advisor-status", Static).update(printable_text(status, multiline=True))
        code = Text()
        if report.kept:
            code.append("Code change" + (f" ({gain:.1f}x)" if gain else "") + "\n", style="bold green")
            for line in report.code:
                code.append(f"  {line}\n", style="cyan")
        elif report.baseline.ok:
            code.append("Nothing won beyond the noise: no change to make.\n", style="bold")
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
        self.query_one("#advisor-results", DataTable).clear()
        self.query_one("#advisor-code", Static).update("")
        self.query_one("#advisor-hint", Static).update("g: stop the guided run · a: hide this panel")
        self.show_progress("starting the guided run…", 0.0)

    def end_run(self) -> None:
        self.set_class(False, "-running")
        self.query_one("#advisor-hint", Static).update(IDLE_HINT)
