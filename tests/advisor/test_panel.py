"""The advisor side panel in the app (Pilot): the finding and plan, a guided run's table and code change from a
runner on a background thread, the toggle key; and the plain dashboard has no panel."""

from __future__ import annotations

import threading

from advisor_support import FakeRunner, measurement
from textual.binding import Binding
from textual.widgets import Static

from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import Signals
from gpumon.sampling.history import History
from gpumon.tui.advisor_app import AdvisorApp, LoggingSource
from gpumon.tui.advisor_component import Advisor
from gpumon.tui.advisor_panel import AdvisorPanel
from gpumon.tui.app import GpumonApp


class QuietSource:
    """A SnapshotSource that never delivers (the panel does not need snapshots to show a guided run)."""

    live = False
    description = "test source"
    interval = 1.0
    paused = False

    def __init__(self) -> None:
        self.history = History()

    def start(self, on_snapshot) -> None:  # type: ignore[no-untyped-def]
        self.on_snapshot = on_snapshot

    def stop(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def faster(self) -> None:
        pass

    def slower(self) -> None:
        pass


def static_text(app: AdvisorApp, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


def factory(runner: FakeRunner, seen: list[threading.Thread]):  # type: ignore[no-untyped-def]
    def make(advisor: Advisor, cancel: threading.Event) -> FakeRunner:
        seen.append(threading.current_thread())
        return runner

    return make


async def test_a_guided_run_fills_the_table_and_shows_the_code_change(demo_signals: Signals) -> None:
    key = frozenset({("num_workers", 2)})
    runner = FakeRunner(measurement(60, 61, 59), {key: measurement(150, 151, 149, peak=None)}, signals=demo_signals)
    threads: list[threading.Thread] = []
    app = AdvisorApp(QuietSource(), runner_factory=factory(runner, threads))
    async with app.run_test(size=(160, 50)) as pilot:
        panel = app.query_one(AdvisorPanel)
        assert not panel.has_class("-hidden")
        await pilot.press("g")
        for _ in range(100):
            await pilot.pause(0.05)
            if panel.report is not None:
                break
        assert panel.report is not None, "the guided run finished and reported"
        rows = panel.results_text().splitlines()
        assert rows[-3].startswith("num_workers 0 -> 2") and rows[-3].endswith("kept")
        assert "150" in rows[-2] and "2.5x" in rows[-2]
        assert "a win beyond the noise" in rows[-1]
        assert "kept num_workers 0 -> 2 (2.5x)" in static_text(app, "#advisor-status")
        assert "DataLoader(..., num_workers=2)" in static_text(app, "#advisor-code")
        assert "Input-bound" in static_text(app, "#advisor-finding")
        assert runner.calls[0] == ("baseline", {}) and runner.calls[-1] == ("finish", {"num_workers": 2})
        thread = app.advisor._guided_thread
        assert thread is not None and thread is not threading.main_thread()


async def test_the_panel_shows_a_finding_and_its_experiments_and_toggles(demo_signals: Signals) -> None:
    app = AdvisorApp(QuietSource(), show_advisor=False)
    async with app.run_test(size=(120, 40)) as pilot:
        panel = app.query_one(AdvisorPanel)
        assert panel.has_class("-hidden") and not panel.display
        await pilot.press("a")
        assert not panel.has_class("-hidden")
        finding = diagnose(demo_signals)
        panel.show_finding(finding)
        panel.show_plan(
            [
                Experiment({"num_workers": 2}, previous={"num_workers": 0}),
                Experiment({"amp_bf16": True}, previous={"amp_bf16": False}),
            ]
        )
        await pilot.pause()
        assert finding.evidence in static_text(app, "#advisor-finding").replace("\n", " ")
        plan = static_text(app, "#advisor-plan")
        assert "1. num_workers 0 -> 2" in plan and "(live)" in plan and "trial run" in plan
        await pilot.press("a")
        assert panel.has_class("-hidden")


async def test_g_without_a_job_says_what_it_needs() -> None:
    app = AdvisorApp(QuietSource())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        assert not app.advisor.guided_running
        assert any("guided runs need a job" in str(n.message) for n in app._notifications)


async def test_the_plain_dashboard_has_no_advisor_panel() -> None:
    app = GpumonApp(QuietSource())
    async with app.run_test(size=(80, 24)) as pilot:
        assert not app.query(AdvisorPanel)
        assert not any(binding.show for binding in app.BINDINGS if isinstance(binding, Binding) and binding.key == "g")
        await pilot.press("g")  # says where the advisor is; starts nothing
        await pilot.pause()
        assert not app.query(AdvisorPanel)
        assert any("the advisor needs a job" in str(n.message) for n in app._notifications)


def test_the_logging_source_keeps_every_snapshot_and_forwards_the_rest() -> None:
    from gpumon.advisor.measure import SnapshotLog
    from gpumon.sampling.snapshot import Snapshot

    inner = QuietSource()
    log = SnapshotLog()
    source = LoggingSource(inner, log)  # type: ignore[arg-type]
    delivered: list[Snapshot] = []
    source.start(delivered.append)
    inner.on_snapshot(Snapshot(timestamp=1.0))
    assert len(log) == 1 and len(delivered) == 1
    assert source.description == "test source" and source.history is inner.history
