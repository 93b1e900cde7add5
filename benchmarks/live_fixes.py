"""The side panel's live fixes on running jobs: a long-epoch loader, GC churn, empty_cache, the demo's panel as SVGs."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import io
import json
import os
import platform
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.scenario_truth import commit, device_names, kill_group
from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import Listener
from gpumon.advisor.measure import INCONCLUSIVE, NO_WIN, SLOWER, WIN, speedup
from gpumon.advisor.results import OK, GuidedReport, VariantResult
from gpumon.advisor.session import AdvisorError, experiment_command, experiment_pid
from gpumon.advisor.trial import outcome_line
from gpumon.jobs.launch import LaunchedJob
from gpumon.jobs.session import hooked_job
from gpumon.printable import printable

if TYPE_CHECKING:
    from textual.app import App

    from gpumon.advisor.trial import TrialRunner
    from gpumon.tui.advisor_component import Advisor
    from gpumon.tui.advisor_panel import AdvisorPanel

USAGE = """\
Each part runs as a user would: the job under `gpumon run --no-tui -- python JOB`, then the same calls
`gpumon experiment --pid PID` and `gpumon experiment -- CMD` make (advisor.session.experiment_pid and
experiment_command), in this process, so a run past its cap is wound down as Ctrl+C would (its changes rolled back,
its report kept). Parts (--only, repeatable; each merges into the --out JSON, so a part per call keeps the others):

  loader       benchmarks/scenarios/live/long_epoch_loader.py (2 workers, 10M samples to an epoch, persistent,
               shuffled): `experiment --pid` on it (gain, wall time, knobs kept, each change's apply time), the job
               stopped, then the trial-run path on the same command; the live/trial gain ratio (target >= 0.90)
               and whether the live climb took < 3 min
  gc_churn     benchmarks/scenarios/live/owner_churn.py --cause gc_churn: its ablation truth (alternating windows,
  empty_cache  the cause present and removed) then `experiment --pid`: whether gc_freeze / skip_empty_cache was
               tried, its gain, kept or rolled back, proved or refuted, against the truth
  panel        the demo under the dashboard with the advisor panel (as `gpumon demo`), `g` pressed, the guided
               run's report shown, then SVG screenshots at 160 and 120 columns and a check that every column and
               every row's figures are in the panel at each width and the verdict in its status line

Usage (repo root; on the GPU machine see gpu_session.sh's part live37):

    python benchmarks/live_fixes.py --out DIR/live-fixes.json                 # every part (its caps: 460 s at most)
    python benchmarks/live_fixes.py --only loader --plan loader_live=4,3,5,200 --out DIR/live-fixes.json
    python benchmarks/live_fixes.py --device cpu --out /tmp/live/live-fixes.json   # tiny sizes: a check

--plan NAME=WINDOW,REPEATS,WARMUP,CAP[,MAX_VARIANTS] (NAME: loader_live, loader_trial, owner, panel) replaces a plan.
--device cpu checks the mechanics only: the advisor sees no GPU idle time there, so each part's knob is asked for
(--ask: num_workers doubled, gc_freeze, skip_empty_cache) instead of planned from the diagnosis.
"""

LOADER_JOB = REPO / "benchmarks" / "scenarios" / "live" / "long_epoch_loader.py"
OWNER_JOB = REPO / "benchmarks" / "scenarios" / "live" / "owner_churn.py"
PARTS = ("loader", "gc_churn", "empty_cache", "panel")
OWNERS = {"gc_churn": ("gc_freeze", "gc_bound"), "empty_cache": ("skip_empty_cache", "allocator_churn")}
"""Each owner job's cause: the live knob that removes it and the finding that names it."""
TARGET_GAIN_RATIO = 0.90
TARGET_LIVE_WALL_S = 180.0
PANEL_SIZES = ((160, 50), (120, 50))
READY_TIMEOUT_S = 120.0
"""How long a job may take to print READY (start-up, CUDA, its workers, and an owner job's truth windows)."""
STOP_WAIT_S = 8.0


@dataclass(frozen=True)
class Plan:
    """How one guided run measures (as `gpumon experiment --window --repeats --warmup --max-variants`) and `cap_s`,
    the most seconds it may run before it is wound down with its report."""

    window_s: float
    repeats: int
    warmup_s: float
    cap_s: float
    max_variants: int = 12


GPU_PLANS = {
    "loader_live": Plan(3.0, 3, 3.0, 115.0),
    "loader_trial": Plan(3.0, 3, 3.0, 100.0),
    "owner": Plan(2.0, 3, 2.0, 28.0, 3),
    "panel": Plan(1.5, 3, 2.0, 66.0),
}
"""Sized for one GPU, the four parts within 460 s (gpu_session.sh live37's timeouts); the loader's two runs share
one plan, shorter than the CLI's (4 s windows, 5 s warm-up), so that both fit the loader's share of that time."""
CPU_PLANS = {
    "loader_live": Plan(1.5, 2, 1.0, 60.0, 4),
    "loader_trial": Plan(1.5, 2, 1.0, 60.0, 4),
    "owner": Plan(1.0, 2, 1.0, 25.0, 2),
    "panel": Plan(1.5, 2, 2.0, 45.0),
}
TRUTH_ROUNDS = {"cuda": (3, 1.0), "cpu": (2, 0.8)}
"""The owner jobs' ablation truth: (rounds, window seconds) per device."""


def cpu_count() -> int:
    """The cores this process may run on (as the jobs count them; torch is not imported here)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def say(line: str) -> None:
    print(line, flush=True)


def ratio(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 3) if part is not None and whole else None


@contextmanager
def capped(seconds: float, cancel: threading.Event) -> Iterator[None]:
    """`cancel` set after `seconds`, or at SIGTERM (a guided run then winds down, rolls back and reports)."""
    timer = threading.Timer(seconds, cancel.set)
    timer.daemon = True
    timer.start()
    CANCELS.add(cancel)
    if STOPPING.is_set():
        cancel.set()
    try:
        yield
    finally:
        timer.cancel()
        CANCELS.discard(cancel)


STOPPING = threading.Event()
"""SIGTERM came (the step's `timeout`): the running guided run winds down, nothing new starts, the jobs are stopped."""
CANCELS: set[threading.Event] = set()


def stop_on_sigterm(_signum: int, _frame: object) -> None:
    say("live_fixes: SIGTERM: winding down (the running experiment reports, the jobs are stopped)")
    STOPPING.set()
    for cancel in list(CANCELS):
        cancel.set()


def listener(tag: str) -> Listener:
    """Each result line as it comes (a run cut by a time limit still shows what it measured)."""

    def listen(event: str, payload: Any) -> None:
        if event in ("baseline", "result"):
            say(f"{tag}  {printable(outcome_line(payload))}")
        elif event == "finding":
            say(f"{tag}  finding: {payload.category}")

    return listen


# -- the jobs ----------------------------------------------------------------------------------------------------


class HookedJob:
    """A job started as a user would, `gpumon run --no-tui -- CMD`, its stdout read line by line (READY pid=P,
    TRUTH {...}); stop() ends the job's process group (it runs in its own session) and gpumon run."""

    def __init__(self, command: Sequence[str], stderr: IO[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpumon", "run", "--no-tui", "--", *command],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.pid: int | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float) -> str | None:
        """The job's next stdout line starting with `prefix`, None when it ends or `timeout` passes first."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0 and not STOPPING.is_set():
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:
                return None
            if line.startswith(prefix):
                return line
        return None

    def ready(self, timeout: float) -> int | None:
        line = self.wait_for("READY ", timeout)
        if line is None:
            return None
        self.pid = int(line.split("pid=", 1)[1].split()[0])
        return self.pid

    def stop(self) -> None:
        for pid in {*([self.pid] if self.pid is not None else []), *self._launched()}:
            if not own_group(pid):
                continue
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + STOP_WAIT_S
                while time.monotonic() < deadline and own_group(pid):
                    time.sleep(0.1)
                if not own_group(pid):
                    break
        kill_group(self.process)

    def _launched(self) -> list[int]:
        """The job gpumon run started (its child, in a session of its own), READY or not."""
        import psutil

        try:
            return [child.pid for child in psutil.Process(self.process.pid).children()]
        except psutil.Error:
            return []

    def __enter__(self) -> HookedJob:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def own_group(pid: int) -> bool:
    """Whether `pid` is alive and leads its own process group (the job gpumon run started in its own session)."""
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


# -- guided runs -------------------------------------------------------------------------------------------------


def report_figures(report: GuidedReport, wall_s: float, cut: bool) -> dict[str, Any]:
    """What a guided run measured: its gain, the knobs kept, every variant with its outcome and reason."""
    data = report.to_dict()
    best = report.best.measurement
    variants = []
    for variant, row in zip(report.variants, data["variants"], strict=True):
        word, reason = variant.outcome()
        variants.append(
            {
                "label": printable(variant.label),
                "change": dict(variant.change),
                "kind": variant.kind,
                "status": variant.status,
                "outcome": word,
                "reason": printable(reason),
                "kept": variant.kept,
                "speedup": row["speedup"],
                "rate": (row["measurement"] or {}).get("rate"),
                "phases": row["phases"],
            }
        )
    return {
        "wall_s": round(wall_s, 1),
        "cut": cut,
        "speedup": data["speedup"],
        "kept": data["kept"],
        "verdict": printable(report.verdict),
        "stopped": printable(report.stopped),
        "finding": report.finding.category if report.finding else None,
        "evidence": printable(report.finding.evidence) if report.finding else None,
        "final_finding": report.final_finding.category if report.final_finding else None,
        "final_evidence": printable(report.final_finding.evidence) if report.final_finding else None,
        "baseline": data["baseline"]["measurement"],
        "baseline_status": report.baseline.status,
        "best_rate": round(best.rate, 2) if best is not None else None,
        "variants": variants,
        "offers": [printable(offer.text()) for offer in report.offers],
        "skipped": [printable(line) for line in report.skipped],
        "unrestored": data["unrestored"],
        "trial_starts": report.meta.get("trial_starts"),
    }


def _experiment(
    tag: str, plan: Plan, heading: str, run: Callable[[threading.Event], GuidedReport]
) -> tuple[GuidedReport | None, dict[str, Any]]:
    """One experiment under `plan`'s cap (`run` gets the cancel event the cap sets), its report and figures."""
    cancel = threading.Event()
    started = time.monotonic()
    say(f"{tag}  {heading} (window {plan.window_s:g} s x {plan.repeats}, cap {plan.cap_s:g} s)")
    try:
        with capped(plan.cap_s, cancel):
            report = run(cancel)
    except AdvisorError as error:
        return None, {"error": printable(str(error)), "wall_s": round(time.monotonic() - started, 1)}
    figures = report_figures(report, time.monotonic() - started, cancel.is_set())
    say(f"{tag}  {_x(figures['speedup'])} in {figures['wall_s']} s, kept {_kept(figures)}: {figures['verdict']}")
    return report, figures


def _plan_arguments(plan: Plan, tag: str, only: Sequence[Experiment] | None, cancel: threading.Event) -> dict[str, Any]:
    """What both experiment paths take from the plan."""
    return {
        "window_s": plan.window_s,
        "repeats": plan.repeats,
        "warmup_s": plan.warmup_s,
        "only": only,
        "listener": listener(tag),
        "cancel": cancel,
        "max_variants": plan.max_variants,
    }


def live_run(
    pid: int, plan: Plan, tag: str, only: Sequence[Experiment] | None
) -> tuple[GuidedReport | None, dict[str, Any]]:
    """`gpumon experiment --pid PID` with `plan` (and `only`: its --try), wound down past its cap."""
    return _experiment(
        tag,
        plan,
        f"gpumon experiment --pid {pid}",
        lambda cancel: experiment_pid(pid, attach=hooked_job, **_plan_arguments(plan, tag, only, cancel)),
    )


def trial_run(command: Sequence[str], plan: Plan, tag: str, only: Sequence[Experiment] | None) -> dict[str, Any]:
    """`gpumon experiment -- CMD` with `plan` (and `only`: its --try): trial runs of the command, wound down past its
    cap."""
    _report, figures = _experiment(
        tag,
        plan,
        "gpumon experiment -- CMD",
        lambda cancel: experiment_command(
            command, launcher=LaunchedJob, cwd=str(REPO), **_plan_arguments(plan, tag, only, cancel)
        ),
    )
    return figures


# -- the parts ---------------------------------------------------------------------------------------------------


def job_log(out_dir: Path, name: str) -> IO[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return (out_dir / f"{name}-job.log").open("w")


def not_ready(what: str, name: str) -> str:
    if STOPPING.is_set():
        return f"{what}: SIGTERM (the step's time limit) came first"
    return f"{what} within {READY_TIMEOUT_S:g} s, or the job ended (see {name}-job.log)"


def asked(knob: str, value: Any, previous: Any, ask: bool) -> list[Experiment] | None:
    """With `ask`, the part's knob asked for (`--try knob=value`) instead of the diagnosis' plan."""
    return [Experiment(knobs={knob: value}, previous={knob: previous}, reason="asked for")] if ask else None


def shown(command: Sequence[str]) -> str:
    return " ".join(["python", *command[1:]]).replace(str(REPO) + "/", "")


def loader_part(
    device: str, plans: Mapping[str, Plan], out_dir: Path, ask: bool, save: Callable[[Mapping[str, Any]], None]
) -> dict[str, Any]:
    workers = 2 if device == "cuda" else 1  # a 2-core check: 1 worker, so a second one is a step to take
    command = [sys.executable, str(LOADER_JOB), "--device", device, "--workers", str(workers)]
    only = asked("num_workers", 2 * workers, workers, ask)
    part: dict[str, Any] = {
        "job": shown(command),
        "workers": workers,
        "asked": [experiment.label for experiment in only or ()],
        "plans": {"live": asdict(plans["loader_live"]), "trial": asdict(plans["loader_trial"])},
    }
    with job_log(out_dir, "loader") as errors, HookedJob(command, errors) as job:
        pid = job.ready(READY_TIMEOUT_S)
        if pid is None:
            part["live"] = {"error": not_ready("no READY line", "loader")}
        else:
            _report, part["live"] = live_run(pid, plans["loader_live"], "loader/live ", only)
    save(part)  # kept should the trial runs be cut by the step's time limit
    if STOPPING.is_set():
        part["trial"] = {"error": "not run: SIGTERM (the step's time limit) came first"}
    else:
        part["trial"] = trial_run(command, plans["loader_trial"], "loader/trial", only)
    part["scores"] = loader_scores(part["live"], part["trial"])
    say(f"loader       {json.dumps(part['scores'])}")
    return part


def loader_scores(live: Mapping[str, Any], trial: Mapping[str, Any]) -> dict[str, Any]:
    gain_ratio = ratio(live.get("speedup"), trial.get("speedup"))
    wall = live.get("wall_s")
    in_time = None if wall is None or "error" in live else bool(not live.get("cut") and wall < TARGET_LIVE_WALL_S)
    return {
        "gain_ratio": gain_ratio,
        # The trial run kept nothing: no gain to reach (1.0x over 1.0x meets nothing).
        "gain_ratio_met": None if gain_ratio is None or not trial.get("kept") else gain_ratio >= TARGET_GAIN_RATIO,
        "rate_ratio": ratio(live.get("best_rate"), trial.get("best_rate")),
        "live_wall_s": wall,
        "live_under_3_min": in_time,
        "targets": {"gain_ratio": TARGET_GAIN_RATIO, "live_wall_s": TARGET_LIVE_WALL_S},
    }


def owner_verdict(variant: VariantResult | None) -> str:
    """proved (the knob won and was kept), refuted (a decided no-win or slower), inconclusive, or why not judged."""
    if variant is None:
        return "not tried"
    decision = variant.decision
    if variant.status != OK or decision is None:
        return variant.outcome()[0]
    return {WIN: "proved", NO_WIN: "refuted", SLOWER: "refuted", INCONCLUSIVE: "inconclusive"}[decision.outcome]


def owner_part(cause: str, device: str, plan: Plan, out_dir: Path, ask: bool) -> dict[str, Any]:
    knob, category = OWNERS[cause]
    rounds, window = TRUTH_ROUNDS[device]
    command = [
        sys.executable,
        str(OWNER_JOB),
        "--cause",
        cause,
        "--device",
        device,
        "--rounds",
        str(rounds),
        "--window",
        f"{window:g}",
    ]
    only = asked(knob, True, False, ask)
    part: dict[str, Any] = {
        "job": shown(command),
        "asked": [experiment.label for experiment in only or ()],
        "knob": knob,
        "category": category,
        "plan": asdict(plan),
    }
    report = None
    with job_log(out_dir, cause) as errors, HookedJob(command, errors) as job:
        line = job.wait_for("TRUTH ", READY_TIMEOUT_S)
        part["truth"] = json.loads(line.split(" ", 1)[1])["truth"] if line else None
        say(f"{cause:<12} truth: {json.dumps(part['truth'])}")
        pid = job.ready(30.0) if line else None
        if pid is None:
            part["live"] = {"error": not_ready("no TRUTH and READY lines", cause)}
        else:
            report, part["live"] = live_run(pid, plan, f"{cause:<12}", only)
    tried = None
    if report is not None:
        tried = next((v for v in report.variants if v.change.get(knob)), None)
        finding = report.finding
        part["named"] = finding is not None and (
            finding.category == category or any(other.category == category for other in finding.secondary)
        )
    gain = speedup(tried.measurement, report.baseline.measurement) if tried is not None and report else None
    truth_gain = (part.get("truth") or {}).get("speedup")
    part.update(
        tried=tried is not None,
        outcome=tried.outcome()[0] if tried is not None else None,
        reason=printable(tried.outcome()[1]) if tried is not None else None,
        knob_speedup=None if gain is None else round(gain, 3),
        kept=bool(tried is not None and tried.kept),
        owner=owner_verdict(tried) if report is not None else None,
        live_over_truth=ratio(gain, truth_gain),
    )
    say(
        f"{cause:<12} {knob}: tried {part['tried']}, {part['outcome']}, gain {part['knob_speedup']}, owner "
        f"{part['owner']}; truth {_x(truth_gain)}"
    )
    return part


# -- the panel ---------------------------------------------------------------------------------------------------


def panel_runner(plan: Plan) -> Callable[[Advisor, threading.Event], TrialRunner | None]:
    """The demo's guided run as the panel's `g` makes it (trial runs of the demo, each followed in the job pane),
    measured with `plan` and live on the trial as `gpumon demo --guided` is (the default's 8 s warm-up and fresh
    trial per knob would take the part's whole time)."""
    from gpumon.advisor.trial import TrialRunner
    from gpumon.jobs.session import trial_source

    def make(advisor: Advisor, cancel: threading.Event) -> TrialRunner | None:
        owner = advisor.owner
        if owner is None:
            return None

        def on_job(job: Any, _label: str) -> None:
            followed = trial_source(job) if job is not None else None
            if followed is not None:
                source, launched_pid = followed
                advisor.follow_job(source, [launched_pid] if launched_pid else [])

        track = getattr(advisor.app.source, "track_pids", None)
        return TrialRunner(
            owner.command,
            launcher=LaunchedJob,
            log=advisor.log,
            track=track,
            cancel=cancel,
            progress=advisor.guided_progress,
            on_job=on_job,
            warmup_s=plan.warmup_s,
            window_s=plan.window_s,
            repeats=plan.repeats,
            min_repeats=min(2, plan.repeats),
            live_on_trial=True,
            live_warmup_s=plan.warmup_s,
        )

    return make


def screen_text(app: App[Any]) -> list[str]:
    """The screen's rows as text (the composited frame export_screenshot draws)."""
    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()[:height]


def panel_check(app: App[Any], panel: AdvisorPanel) -> dict[str, Any]:
    """At the present size: every column name and every row's figures in the results as the panel draws them at its
    width (a figure folded across two lines counts as missing), the verdict in the status line, and which column
    names are on the screen as it is scrolled."""
    from rich.console import Console
    from textual.widgets import Static

    from gpumon.tui.advisor_panel import FIGURES, figure_cells, result_lines

    report = panel.report
    rows = list(report.rows) if report is not None else list(panel.results)
    width = max(1, panel.query_one("#advisor-results", Static).content_region.width)
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(result_lines(rows, width))
    text = console.export_text()
    names = [name for name, _cells in FIGURES]
    units = {row.measurement.unit for row in rows if row.measurement is not None and row.measurement.rates}
    if len(units) == 1:
        names[2] = units.pop()
    cells = {cell for row in rows for cell in figure_cells(row, rows[0] if rows else None) if cell not in ("-", "")}
    missing_cells = sorted(cell for cell in cells if cell not in text)
    status = " ".join(str(panel.query_one("#advisor-status", Static).render()).split())
    verdict = " ".join(report.verdict.split()) if report is not None else None
    left = panel.region.x
    try:
        on_screen: str | None = "\n".join(row[left:] for row in screen_text(app))
    except Exception as error:  # noqa: BLE001 - Textual's compositor is private: the SVG is the record then
        say(f"panel        the screen's text could not be read: {error!r}")
        on_screen = None
    return {
        "panel_width": panel.region.width,
        "results_width": width,
        "rows": len(rows),
        "columns_in_results": {name: name in text for name in names},
        "figures_missing": missing_cells,
        "verdict_in_status": None if verdict is None else printable(verdict) in status,
        "columns_on_screen": None if on_screen is None else {name: name in on_screen for name in names},
        "status": status,
    }


async def panel_screens(device: str, plan: Plan, out_dir: Path) -> dict[str, Any]:
    from textual.widgets import Static

    from gpumon.cli.demo import DEMO_RUN_S, demo_command
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp, DemoOwner
    from gpumon.tui.advisor_panel import AdvisorPanel

    out_dir.mkdir(parents=True, exist_ok=True)
    command = demo_command(device, DEMO_RUN_S)
    demo = LaunchedJob(command, log=out_dir / "panel-demo.log").start()
    owner = DemoOwner(command=command, current=demo)
    sampler = Sampler(interval=1.0)
    sampler.track_pids([demo.pid])
    app = AdvisorApp(sampler, job=demo.follow(), owner=owner, runner_factory=panel_runner(plan))
    part: dict[str, Any] = {"plan": asdict(plan), "sizes": {}, "svgs": {}}
    try:
        columns, rows = PANEL_SIZES[0]
        async with app.run_test(size=(columns, rows)) as pilot:
            panel = app.query_one(AdvisorPanel)

            async def until(done: Callable[[], bool], seconds: float, stoppable: bool = True) -> bool:
                deadline = time.monotonic() + seconds
                while not done():
                    if time.monotonic() > deadline or (stoppable and STOPPING.is_set()):
                        return False
                    await pilot.pause(0.25)
                return True

            await pilot.pause(1.0)
            started = time.monotonic()
            say(f"panel        g pressed: the demo's guided run (cap {plan.cap_s:g} s)")
            await pilot.press("g")
            finished = await until(lambda: panel.report is not None and not app.advisor.guided_running, plan.cap_s)
            if not finished:
                await pilot.press("g")  # stops it: the run winds down and reports
                await until(lambda: not app.advisor.guided_running, 15.0, stoppable=False)
            part.update(finished=finished, wall_s=round(time.monotonic() - started, 1))
            report = panel.report
            part["verdict"] = printable(report.verdict) if report is not None else None
            part["report"] = report_figures(report, part["wall_s"], not finished) if report is not None else None
            say(f"panel        guided run {'done' if finished else 'cut'} in {part['wall_s']} s: {part['verdict']}")
            await pilot.pause(1.0)
            for columns, rows in PANEL_SIZES:
                await pilot.resize_terminal(columns, rows)
                await pilot.pause(0.5)
                panel.scroll_to_widget(panel.query_one("#advisor-status", Static), animate=False, top=True)
                await pilot.pause(0.3)
                name = f"panel-{columns}x{rows}.svg"
                title = f"gpumon demo: the advisor panel after a guided run ({columns}x{rows})"
                (out_dir / name).write_text(app.export_screenshot(title=title), encoding="utf-8")
                part["svgs"][str(columns)] = name
                part["sizes"][str(columns)] = panel_check(app, panel)
                say(f"panel        {columns}x{rows}: {name}; {json.dumps(panel_summary(part['sizes'][str(columns)]))}")
    finally:
        owner.stop_all()
    return part


def panel_summary(check: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "all_columns": all(check["columns_in_results"].values()),
        "figures_missing": len(check["figures_missing"]),
        "verdict_in_status": check["verdict_in_status"],
    }


# -- results -----------------------------------------------------------------------------------------------------


class Results:
    """The JSON (merged with what is there when only some parts run) and the Markdown table beside it, rewritten
    after each part."""

    def __init__(self, path: Path | None, meta: dict[str, Any], merge: bool) -> None:
        self.path = path
        self.data: dict[str, Any] = {"meta": meta, "parts": {}}
        if merge and path is not None and path.exists():
            try:
                old = json.loads(path.read_text())
                self.data["parts"] = dict(old.get("parts") or {})
                self.data["meta"]["commands"] = [*old.get("meta", {}).get("commands", []), *meta["commands"]]
            except (OSError, ValueError, AttributeError):
                pass

    def set(self, name: str, part: Mapping[str, Any]) -> None:
        self.data["parts"][name] = {**part, "date": self.data["meta"]["date"], "commit": self.data["meta"]["commit"]}
        self.write()

    def write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=1) + "\n")
        self.path.with_suffix(".md").write_text(markdown(self.data))


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _tried(live: Mapping[str, Any]) -> str:
    shown = [f"{v['label']}: {v['outcome']}" for v in live.get("variants", [])]
    return "; ".join(shown) or "nothing"


def _kept(live: Mapping[str, Any]) -> str:
    kept = live.get("kept")
    if kept is None:
        return "-"
    return ", ".join(f"{name}={value}" for name, value in kept.items()) or "none"


def _wall(live: Mapping[str, Any]) -> str:
    if "wall_s" not in live:
        return "-"
    return f"{live['wall_s']:g} s{' (cut)' if live.get('cut') else ''}"


def _path(kind: str, part: Mapping[str, Any]) -> str:
    command = "`experiment --pid`" if kind == "live" else "`experiment -- CMD`"
    asked = "; ".join(part.get("asked") or ())
    return f"{kind} ({command}{', asked: ' + asked if asked else ''})"


def markdown(data: Mapping[str, Any]) -> str:
    meta, parts = data["meta"], data["parts"]
    lines = [
        f"{meta['device']}; {meta['cores']} cores; {meta['date']}; commit {meta['commit']}; "
        + "; ".join(f"`{command}`" for command in meta["commands"]),
        "",
        "| job | path | finding | tried: outcome | kept | gain | wall | against | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    loader = parts.get("loader")
    if loader:
        live, trial, scores = loader.get("live", {}), loader.get("trial", {}), loader.get("scores", {})
        job = f"long-epoch loader, {loader['workers']} worker{'s' if loader['workers'] != 1 else ''}"
        met = "-" if scores.get("gain_ratio_met") is None else ("met" if scores["gain_ratio_met"] else "missed")
        in_time = scores.get("live_under_3_min")
        lines.append(
            f"| {job} | {_path('live', loader)} | {live.get('finding') or live.get('error', '-')} | {_tried(live)} "
            f"| {_kept(live)} | {_x(live.get('speedup'))} | {_wall(live)} | trial {_x(trial.get('speedup'))}"
            f" | gain {scores.get('gain_ratio')} (>= {TARGET_GAIN_RATIO}: {met}), rate {scores.get('rate_ratio')}; "
            f"< 3 min: {'-' if in_time is None else ('yes' if in_time else 'no')} |"
        )
        lines.append(
            f"| {job} | {_path('trial', loader)} | {trial.get('finding') or trial.get('error', '-')} | {_tried(trial)} "
            f"| {_kept(trial)} | {_x(trial.get('speedup'))} | {_wall(trial)} | - | - |"
        )
    for cause in OWNERS:
        owner = parts.get(cause)
        if not owner:
            continue
        live, truth = owner.get("live", {}), owner.get("truth") or {}
        against = (
            f"ablation {_x(truth.get('speedup'))} (share {truth.get('share')})" if truth else "ablation not measured"
        )
        finding = live.get("finding") or live.get("error", "-")
        if owner.get("named") is False:
            finding += f" (no {owner['category']})"
        lines.append(
            f"| {cause} | {_path('live', owner)} | {finding} | "
            f"{_tried(live)} | {_kept(live)} | {owner['knob']} {_x(owner.get('knob_speedup'))}: "
            f"{owner.get('owner')} | {_wall(live)} | {against} | {owner.get('live_over_truth')} |"
        )
    panel = parts.get("panel")
    if panel:
        run = f"{'done' if panel.get('finished') else 'cut at its cap'} in {panel.get('wall_s')} s"
        lines += [
            "",
            f"The demo's panel after its guided run ({run}): {panel.get('verdict')}",
            "",
            "| size | SVG | rows | every column | figures missing | verdict in status |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for columns, check in panel.get("sizes", {}).items():
            lines.append(
                f"| {columns} columns | {panel['svgs'].get(columns)} | {check['rows']} | "
                f"{'yes' if all(check['columns_in_results'].values()) else 'no'} | {len(check['figures_missing'])} | "
                f"{check['verdict_in_status']} |"
            )
    return "\n".join(lines) + "\n"


# -- main --------------------------------------------------------------------------------------------------------


def parse_plan(text: str) -> tuple[str, Plan]:
    name, sep, values = text.partition("=")
    fields = values.split(",")
    if not sep or name not in GPU_PLANS or len(fields) not in (4, 5):
        names = ", ".join(GPU_PLANS)
        raise argparse.ArgumentTypeError(f"{text!r}: NAME=WINDOW,REPEATS,WARMUP,CAP[,MAX] (NAME: {names})")
    try:
        window, repeats, warmup, cap = float(fields[0]), int(fields[1]), float(fields[2]), float(fields[3])
        most = int(fields[4]) if len(fields) == 5 else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: numbers expected") from None
    if window <= 0 or repeats < 1 or warmup < 0 or cap <= 0 or (most is not None and most < 1):
        raise argparse.ArgumentTypeError(f"{text!r}: out of range")
    plan = Plan(window, repeats, warmup, cap)
    return name, plan if most is None else replace(plan, max_variants=most)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="the jobs' device")
    parser.add_argument("--only", action="append", choices=PARTS, default=[], help="run these parts (repeatable)")
    parser.add_argument("--plan", action="append", type=parse_plan, default=[], metavar="NAME=W,R,U,CAP[,MAX]")
    parser.add_argument(
        "--ask",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ask for each part's knob (as --try does: num_workers doubled, gc_freeze, skip_empty_cache) instead of "
        "the diagnosis' plan; the default on the CPU, where the advisor sees no GPU idle time to fix",
    )
    parser.add_argument("--out", type=Path, default=None, metavar="JSON", help="results JSON (.md and SVGs beside)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    gpus = device_names()
    device = args.device if args.device != "auto" else ("cuda" if gpus else "cpu")
    if device == "cuda" and not gpus:
        print("live_fixes: --device cuda: no GPU here (nvidia-smi lists none)", file=sys.stderr)
        return 3
    plans = {**(GPU_PLANS if device == "cuda" else CPU_PLANS), **dict(args.plan)}
    ask = args.ask if args.ask is not None else device == "cpu"
    # The jobs, trial runs and the demo import the benchmarks and gpumon_demo from this tree.
    paths = [str(REPO), str(REPO / "demo"), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    command = " ".join(["python", "benchmarks/live_fixes.py", *(sys.argv[1:] if argv is None else argv)])
    meta = {
        "device": f"{gpus[0]} x{len(gpus)}" if gpus else f"CPU only ({platform.machine()})",
        "cores": cpu_count(),
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "commands": [command],
        "asked": ask,
    }
    results = Results(args.out, meta, merge=bool(args.only))
    out_dir = args.out.parent if args.out is not None else Path("live-fixes")
    say(f"live fixes on {meta['device']}, {meta['cores']} cores, {meta['date']}, commit {meta['commit']}")
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    for name in args.only or PARTS:
        if STOPPING.is_set():
            break
        started = time.monotonic()
        if name == "loader":
            part = loader_part(device, plans, out_dir, ask, lambda partial: results.set("loader", partial))
        elif name in OWNERS:
            part = owner_part(name, device, plans["owner"], out_dir, ask)
        else:
            part = asyncio.run(panel_screens(device, plans["panel"], out_dir))
        part["part_wall_s"] = round(time.monotonic() - started, 1)
        results.set(name, part)
        say(f"{name:<12} done in {part['part_wall_s']} s")
    print(markdown(results.data), end="")
    return 0


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
