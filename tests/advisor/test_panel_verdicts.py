"""The panel tells the truth: its rows, status line and verdict come from one report; every column shows at 120 and
160 terminal columns with each row's reason on its own line; and "measuring" shows until a finding has data."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from advisor_support import FakeRunner, measurement
from rich.console import Console
from test_panel import QuietSource
from textual.widgets import Static

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun
from gpumon.advisor.results import NOT_APPLIED
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import Signals
from gpumon.tui.advisor_app import AdvisorApp
from gpumon.tui.advisor_panel import AdvisorPanel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tui"))
from screen_text import screen_rows

WORKERS = Experiment({"num_workers": 2}, previous={"num_workers": 0})
PIN = Experiment({"pin_memory": True}, previous={"pin_memory": False})
BENCHMARK = Experiment({"cudnn_benchmark": True}, previous={"cudnn_benchmark": False})
COLUMN_NAMES = ("GPU-Util", "SM", "samples/s", "speed-up", "noise", "peak mem", "MFU", "J/sample")


def noisy_report():  # type: ignore[no-untyped-def]
    """A baseline at ±91%, a candidate 18.6x faster inside that noise, one not in effect, one clear win."""
    runner = FakeRunner(
        measurement(5.0, 101.8, 53.4, util=35.0, sm=12.0, peak=3 << 30),
        {
            frozenset({("num_workers", 2)}): measurement(40, 1940, 1000, util=80.0, sm=30.0, peak=3 << 30),
            frozenset({("pin_memory", True)}): (NOT_APPLIED, "not in effect within 90 s: rolled back"),
            frozenset({("cudnn_benchmark", True)}): measurement(300, 301, 299, util=90.0, sm=40.0, peak=3 << 30),
        },
    )
    return GuidedRun(runner, only=[WORKERS, PIN, BENCHMARK]).run()


def test_a_winning_row_gives_a_verdict_naming_it() -> None:
    report = noisy_report()
    words = [row.outcome(is_baseline=index == 0)[0] for index, row in enumerate(report.rows)]
    assert words == ["baseline", "inconclusive", "not applied", "kept"]
    assert report.verdict == "kept cudnn_benchmark off -> on (5.6x)"


@pytest.mark.parametrize("columns", [120, 160])
async def test_every_column_and_each_reason_shows_at_120_and_160_columns(columns: int) -> None:
    report = noisy_report()
    app = AdvisorApp(QuietSource())
    async with app.run_test(size=(columns, 60)) as pilot:
        panel = app.query_one(AdvisorPanel)
        for row in report.rows:
            panel.add_result(row)
        panel.show_report(report)
        await pilot.pause()
        left = panel.region.x
        lines = [row[left:] for row in screen_rows(app)]
        screen = "\n".join(lines)
        flowing = " ".join(" ".join(line.strip(" │").split()) for line in lines)  # wrapped reasons read whole
        for name in COLUMN_NAMES:
            assert name in screen, f"{name} cut off at {columns} columns"
        for figure in ("18.6x", "±96%", "±91%", "5.6x", "3.0 GiB", "993", "53.4"):
            assert figure in screen, f"{figure} cut off at {columns} columns"
        assert "inconclusive: noise ±96% (18.6x measured); to decide: a quieter machine" in flowing
        assert "not in effect within 90 s: rolled back" in flowing
        assert "a win beyond the noise (5.6x, noise ±91%)" in flowing
        assert "Guided run done: kept cudnn_benchmark off -> on (5.6x)" in flowing
        assert "nothing won" not in flowing and "no win" not in flowing, "no verdict disagrees with the rows"


async def test_measuring_shows_until_the_finding_has_data() -> None:
    no_data = diagnose(Signals.of(source="hook", steps=0))
    assert no_data.confidence == 0.0
    app = AdvisorApp(QuietSource())
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.query_one(AdvisorPanel)
        panel.show_finding(no_data, Signals.of(source="hook", steps=0))
        await pilot.pause()
        screen = "\n".join(screen_rows(app))
        assert "Measuring: 0 of 3 steps" in screen
        assert "Healthy" not in screen and "confidence 0%" not in screen
        assert panel.measuring and panel.finding is None


def test_results_lines_fit_any_width_from_the_narrowest_panel() -> None:
    from gpumon.tui.advisor_panel import result_lines

    report = noisy_report()
    for width in (38, 49, 69):
        text = result_lines(report.rows, width)
        console = Console(width=width, file=io.StringIO(), record=True)
        console.print(text)
        lines = console.export_text().splitlines()
        assert all(len(line) <= width for line in lines)
        assert all(name in "\n".join(lines) for name in COLUMN_NAMES)


class EndedJob:
    """A job source whose job has ended (what the live diagnosis reads of it: its view)."""

    class View:
        ended = True

    def view(self) -> EndedJob.View:
        return EndedJob.View()

    def stop(self) -> None:
        pass


async def test_an_ended_job_keeps_its_last_verdict_instead_of_measuring_again(demo_signals: Signals) -> None:
    """Once the job has ended, the live diagnosis (which would find no step in its window) leaves the last verdict
    up and says it is the last one; a job that ended before any verdict is said to have, never "Measuring"."""
    app = AdvisorApp(QuietSource())
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.query_one(AdvisorPanel)
        advisor = app.advisor
        app.job = EndedJob()  # type: ignore[assignment]
        advisor._diagnose_now()
        await pilot.pause()
        screen = "\n".join(screen_rows(app))
        assert "The job has ended without a verdict" in screen and "Measuring" not in screen
        finding = diagnose(demo_signals)
        panel.show_finding(finding, demo_signals)
        advisor._diagnose_now()
        await pilot.pause()
        shown = str(app.query_one("#advisor-finding", Static).render())
        assert finding.headline in shown and shown.endswith("the verdict above is the last one")
