"""The advisor as a part the dashboard owns (its Extension, gpumon/tui/extension.py): the side panel (`a` shows or
hides it), a diagnosis of the attached job every few seconds and the guided run (`g` starts or stops it), over the
snapshots a LoggingSource keeps.

Every piece of advisor work runs on a background thread and reaches the UI through the app's call_later: the
diagnosis (one at a time, the next scheduled after the last one finished) and the guided run's events and progress.
The guided run measures the job it can: the demo's command in trial runs when the app owns it (`gpumon demo`: the
demo is stopped, each variant runs and is followed in the job pane, then the demo restarts with the knobs that won),
else live experiments on the attached hooked job (math-neutral knobs, rolled back unless they win).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpumon.advisor.catalogue import experiments_for
from gpumon.advisor.guided import GuidedRun, JobCommand, Runner
from gpumon.advisor.live import LiveRunner
from gpumon.advisor.measure import SnapshotLog
from gpumon.advisor.results import GuidedReport
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import Signals, build_signals
from gpumon.advisor.trial import TrialRunner
from gpumon.jobs.job_control import TrialJob
from gpumon.jobs.launch import LaunchedJob, new_log_path
from gpumon.jobs.session import trial_source
from gpumon.jobs.source import JobSource
from gpumon.printable import printable
from gpumon.sampling.snapshot import Snapshot
from gpumon.sampling.source import SnapshotSource
from gpumon.tui.advisor_panel import AdvisorPanel
from gpumon.tui.app import ReadsEnergy, TracksPids
from gpumon.tui.keys import Where

if TYPE_CHECKING:
    from textual.widget import Widget

    from gpumon.tui.app import GpumonApp

log = logging.getLogger(__name__)

DIAGNOSE_EVERY_S = 5.0
DIAGNOSIS_WINDOW_S = 10.0
FIRST_DIAGNOSIS_S = 3.0
GUIDED_JOIN_S = 20.0
"""On quit, how long the app waits for a running guided run to stop its trial process."""


class LoggingSource:
    """A SnapshotSource that forwards everything to `inner` and also keeps every snapshot in `log`."""

    def __init__(self, inner: SnapshotSource, log: SnapshotLog) -> None:
        self.inner = inner
        self.log = log
        self.history = inner.history
        self.live = inner.live

    def start(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        def deliver(snapshot: Snapshot) -> None:
            self.log.add(snapshot)
            on_snapshot(snapshot)

        self.inner.start(deliver)

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def interval(self) -> float:
        return self.inner.interval

    @property
    def paused(self) -> bool:
        return self.inner.paused

    def stop(self) -> None:
        self.inner.stop()

    def pause(self) -> None:
        self.inner.pause()

    def resume(self) -> None:
        self.inner.resume()

    def faster(self) -> None:
        self.inner.faster()

    def slower(self) -> None:
        self.inner.slower()

    def track_pids(self, pids: Iterable[int]) -> None:
        if isinstance(self.inner, TracksPids):
            self.inner.track_pids(pids)

    def read_energy_often(self, often: bool) -> None:
        if isinstance(self.inner, ReadsEnergy):
            self.inner.read_energy_often(often)


@dataclass
class DemoOwner:
    """The demo trainer the app started (`gpumon demo`): what trial runs run, and the jobs to stop at the end."""

    command: list[str]
    current: LaunchedJob | None = None
    started: list[LaunchedJob] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.current is not None:
            self.started.append(self.current)

    def stop_current(self) -> None:
        for job in self.started:
            job.close()

    def restart(self, knobs: Mapping[str, Any]) -> LaunchedJob:
        """Start the demo again with `knobs` (what the guided run kept), hooked; LaunchError for a bad knob."""
        job = LaunchedJob(self.command, knobs=knobs, log=new_log_path("gpumon-demo-")).start()
        self.current = job
        self.started.append(job)
        return job

    def stop_all(self) -> None:
        self.stop_current()


RunnerFactory = Callable[["Advisor", threading.Event], Runner | None]
"""Makes the runner of a guided run (tests inject a fake one); None when this job cannot be experimented on."""


class Advisor:
    """The advisor side panel and its work, owned by a GpumonApp (AdvisorApp builds both).

    owner: the demo the app started (trial runs then run its command); show: the panel visible at start;
    runner_factory: overrides how the guided run's runner is made; notice: said once at start (e.g. that the demo
    runs on the CPU).
    """

    keys = Where.ADVISOR

    def __init__(
        self,
        *,
        owner: DemoOwner | None = None,
        show: bool = True,
        runner_factory: RunnerFactory | None = None,
        diagnose_every: float = DIAGNOSE_EVERY_S,
        notice: str | None = None,
    ) -> None:
        self.log = SnapshotLog()
        """Every snapshot the app's source delivered (through logging(source))."""
        self.owner = owner
        self.show = show
        self.runner_factory = runner_factory or default_runner_factory
        self.diagnose_every = diagnose_every
        self.notice = notice
        self.panel: AdvisorPanel | None = None
        self.latest_finding: Finding | None = None
        self.latest_signals: Signals | None = None
        self._app: GpumonApp | None = None
        self._guided_thread: threading.Thread | None = None
        self._guided_cancel = threading.Event()
        self._diagnosing = False

    def logging(self, source: SnapshotSource) -> LoggingSource:
        """`source`, its snapshots kept in this advisor's log: the app's source."""
        return LoggingSource(source, self.log)

    @property
    def app(self) -> GpumonApp:
        """The app that owns this advisor (from its start)."""
        if self._app is None:
            raise RuntimeError("the advisor has not started")
        return self._app

    @property
    def guided_running(self) -> bool:
        return self._guided_thread is not None and self._guided_thread.is_alive()

    # -- the app's hooks ---------------------------------------------------------------------------

    def widgets(self) -> Iterable[Widget]:
        self.panel = AdvisorPanel(id="advisor", classes="" if self.show else "-hidden")
        return (self.panel,)

    def start(self, app: GpumonApp) -> None:
        self._app = app
        app.set_timer(FIRST_DIAGNOSIS_S, self._diagnose_tick)
        if self.notice:
            app.notify(self.notice, timeout=10)

    def stop(self) -> None:
        self._guided_cancel.set()
        thread = self._guided_thread
        if thread is not None and thread.is_alive():
            thread.join(GUIDED_JOIN_S)

    def run_action(self, action: str) -> bool:
        if action == "toggle_advisor":
            self.toggle_panel()
        elif action == "guided":
            self.toggle_guided()
        else:
            return False
        return True

    # -- the panel -------------------------------------------------------------------------------

    def toggle_panel(self) -> None:
        panel = self.panel
        if panel is not None:
            panel.set_class(not panel.has_class("-hidden"), "-hidden")

    # -- periodic diagnosis ----------------------------------------------------------------------

    def _diagnose_tick(self) -> None:
        app = self.app
        if self._diagnosing or self.guided_running or app.job is None:
            app.set_timer(self.diagnose_every, self._diagnose_tick)
            return
        self._diagnosing = True
        app.run_worker(self._diagnose_now, thread=True, exclusive=True, group="advisor-diagnosis")

    def _diagnose_now(self) -> None:
        """On a worker thread: the job's signals over the last seconds, diagnosed."""
        app = self.app
        try:
            job = app.job
            if job is None:
                app.call_later(self._show_finding, None, None)
                return
            end = time.time()
            start = end - DIAGNOSIS_WINDOW_S
            view = job.view()
            if getattr(view, "ended", False):
                app.call_later(self._show_ended)
                return
            signals = build_signals(self.log.between(start, end), view, start=start, end=end)
            app.call_later(self._show_finding, diagnose(signals), signals)
        except Exception:  # a failed diagnosis is retried at the next tick
            log.warning("the live diagnosis failed", exc_info=True)
            app.call_later(self._show_finding, None, None)

    def _show_finding(self, finding: Finding | None, signals: Signals | None) -> None:
        self._diagnosing = False
        if finding is not None and signals is not None and not self.guided_running:
            panel = self.panel
            if panel is not None:
                panel.show_finding(finding, signals)
                plan = [] if panel.measuring else experiments_for(finding, signals, cores=os.cpu_count())
                panel.show_plan(plan)
            if panel is None or not panel.measuring:
                self.latest_finding, self.latest_signals = finding, signals
        self.app.set_timer(self.diagnose_every, self._diagnose_tick)

    def _show_ended(self) -> None:
        self._diagnosing = False
        panel = self.panel
        if panel is not None and not self.guided_running:
            panel.show_ended()
        self.app.set_timer(self.diagnose_every, self._diagnose_tick)

    # -- the guided run --------------------------------------------------------------------------

    def toggle_guided(self) -> None:
        panel = self.panel
        if self.guided_running:
            self._guided_cancel.set()
            if panel is not None:
                panel.show_progress("stopping the guided run…", None)
            return
        self._guided_cancel = threading.Event()
        runner = self.runner_factory(self, self._guided_cancel)
        if runner is None:
            self.app.notify(
                "guided runs need a job with the gpumon hook (import gpumon.hook, gpumon run) or gpumon demo",
                severity="warning",
                timeout=6,
            )
            return
        if panel is not None:
            panel.set_class(False, "-hidden")
            panel.start_run()
        self._guided_thread = threading.Thread(
            target=self._guided_main, args=(runner,), name="gpumon-guided", daemon=True
        )
        self._guided_thread.start()

    def _guided_main(self, runner: Runner) -> None:
        error = None
        try:
            if self.owner is not None:
                self.guided_progress("stopping the demo to run the trials…", 0.0)
                self.owner.stop_current()
            run = GuidedRun(
                runner,
                cancel=self._guided_cancel,
                listener=self._guided_listener,
                meta={"command": " ".join(self.owner.command) if self.owner else ""},
                job_command=self._job_command(),
            )
            report = run.run()
            if self.owner is not None and not self._guided_cancel.is_set():
                self._restart_demo(report)
        except Exception as exc:  # noqa: BLE001 - shown in the panel, never raised into the UI
            error = f"{type(exc).__name__}: {exc}"
        self.app.call_later(self._guided_finished, error)

    def _job_command(self) -> JobCommand | None:
        """The attached job's own command (its hook's hello): what a knob that cannot apply live is offered as a
        trial run of. None for the demo the app owns (its trials are the command already)."""
        job = self.app.job
        if self.owner is not None or job is None or job.primary is None:
            return None
        info = job.primary.view().info
        return JobCommand.from_hello(info.hello if info is not None else None)

    def _guided_listener(self, event: str, payload: Any) -> None:
        """The guided run's listener (gpumon.advisor.guided.Listener), on its thread."""
        self.app.call_later(self._guided_event, event, payload)

    def guided_progress(self, message: str, fraction: float | None) -> None:
        """The runner's progress callback (any thread)."""
        self.app.call_later(self._guided_progress, message, fraction)

    def _restart_demo(self, report: GuidedReport) -> None:
        owner = self.owner
        assert owner is not None
        demo = owner.restart(report.kept)
        self.follow_job(demo.follow(), [demo.pid])

    def follow_job(self, job: JobSource | None, pids: Sequence[int] = ()) -> None:
        """From any thread: show `job` in the job pane (a trial run, or the restarted demo)."""
        if job is None or self._guided_cancel.is_set():
            return  # while quitting the UI loop may be waiting for this thread: do not wait for it
        try:
            self.app.call_from_thread(self._follow_now, job, list(pids))
        except RuntimeError:
            pass  # the app is shutting down

    def _follow_now(self, job: JobSource, pids: list[int]) -> None:
        app = self.app
        if isinstance(app.source, TracksPids) and pids:
            app.source.track_pids(pids)
        app.switch_to(job)

    def _guided_event(self, event: str, payload: Any) -> None:
        panel = self.panel
        if panel is None:
            return
        if event in ("baseline", "result"):
            panel.add_result(payload)
        elif event == "finding":
            self.latest_finding = payload
            panel.show_finding(payload)
        elif event == "plan":
            panel.show_plan(payload)
        elif event == "start":
            panel.show_progress(f"running: {payload.label}", 0.0)
        elif event == "done":
            panel.show_report(payload)

    def _guided_progress(self, message: str, fraction: float | None) -> None:
        if self.panel is not None and self.guided_running:
            self.panel.show_progress(message, fraction)

    def _guided_finished(self, error: str | None) -> None:
        panel = self.panel
        if panel is not None:
            panel.end_run()
            if error:
                panel.show_progress(f"the guided run failed: {error}", None)
        if error:
            self.app.notify(f"guided run failed: {printable(str(error))}", severity="error", timeout=8, markup=False)


def default_runner_factory(advisor: Advisor, cancel: threading.Event) -> Runner | None:
    """Trial runs of the demo's command when the app owns it; live experiments on a hooked attached job."""
    if advisor.owner is not None:

        def on_job(job: TrialJob | None, _label: str) -> None:
            followed = trial_source(job) if job is not None else None
            if followed is not None:
                source, launched_pid = followed
                advisor.follow_job(source, [launched_pid] if launched_pid else [])

        source = advisor.app.source
        track = source.track_pids if isinstance(source, TracksPids) else None
        return TrialRunner(
            advisor.owner.command,
            launcher=LaunchedJob,
            log=advisor.log,
            track=track,
            cancel=cancel,
            progress=advisor.guided_progress,
            on_job=on_job,
            warmup_s=8.0,
        )
    job = advisor.app.job
    if job is not None and job.primary is not None:
        return LiveRunner(job.primary, log=advisor.log, cancel=cancel, progress=advisor.guided_progress)
    return None
