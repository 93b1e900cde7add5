"""Trial runs: short separate runs of the user's command with knobs injected (GPUMON_KNOBS) and the hook, measured.

Each trial is its own process group (start_new_session), so it is stopped as a whole, SIGINT first (the job's own
Ctrl+C), then SIGTERM, then SIGKILL; it never shares anything with a job the user is running. A knob the hook
does not apply (amp_bf16, batch_size, ...) counts only when the command confirms it: it acknowledges it in the
GPUMON_KNOBS_ACK file, or the hook's state shows it (an enabled bf16 autocast, the DataLoader's batch size).
Otherwise the variant is recorded as not applied: it needs a code change.

With `live_on_trial`, a trial that measured well is left running: a math-neutral knob (Experiment.live) is then
tried on it through its hook (a LiveRunner on its client) instead of a restart, and rolled back there if it loses;
so is a knob the trial's script says it can change while it runs (GPUMON_KNOBS_LIVE, script_knobs.py: the demo
trainer builds a new DataLoader for another batch size, turns autocast or channels_last on or off). One that does
not take effect within `live_apply_timeout_s` gets a trial run after all. Any other knob stops the running trial and
starts a fresh one with the knobs kept so far plus the change.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpumon import protocol
from gpumon.advisor.auto_capture import AUTO_CAPTURE_STEPS, Notice, capture_reason, with_capture
from gpumon.advisor.capture import Capture
from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.efficiency import with_efficiency
from gpumon.advisor.live import LiveRunner, changeable
from gpumon.advisor.measure import (
    Cancelled,
    MeasurementPlan,
    Progress,
    Reference,
    SnapshotLog,
    StepLog,
    measurement_from,
    sleep_checked,
)
from gpumon.advisor.results import (
    CANCELLED,
    FAILED,
    KIND_TRIAL,
    NOT_APPLIED,
    OK,
    OOM,
    TIMEOUT,
    VariantIdentity,
    VariantResult,
)
from gpumon.advisor.script_knobs import ScriptKnobs
from gpumon.advisor.signals import build_signals
from gpumon.jobs.job_control import LaunchError, LaunchTrial, TrialJob, TrialProcess
from gpumon.jobs.jobstate import HookedView

log = logging.getLogger(__name__)

KNOBS_ACK_ENV = "GPUMON_KNOBS_ACK"
"""A file path given to a trial: a command that reads GPUMON_KNOBS itself writes there the JSON list of the knob
names it applied (the demo trainer does)."""
STARTUP_TIMEOUT_S = 180.0
WARMUP_S = 5.0
WARMUP_STEPS = 3
WINDOW_S = 4.0
REPEATS = 3
STOP_GRACE_S = 10.0
LIVE_WARMUP_S = 3.0
"""Warm-up after a live change took effect on a running trial (new DataLoader workers filling their queues)."""
LIVE_APPLY_TIMEOUT_S = 15.0
"""How long a live change may take to show in the running trial before it gets a trial run instead."""
OOM_MARKERS = ("out of memory", "outofmemoryerror", "cuda error: out of memory")

JobCallback = Callable[[TrialJob | None, str], None]
"""Told about each trial's job as it starts (the job, its label) and None when it stopped (the TUI follows it)."""


@dataclass
class RunningTrial:
    """One started trial: its process group, the job followed through its hook, and every step it streamed."""

    label: str
    knobs: dict[str, Any]
    launch: TrialProcess
    job: TrialJob
    steps: StepLog
    out_path: Path
    ack_path: Path
    script: ScriptKnobs
    """The knobs its script changes while it runs, if it answers GPUMON_KNOBS_LIVE."""
    listening: set[int] = field(default_factory=set)

    def attach_listener(self, _what: str = "") -> None:
        for client in self.job.clients:
            if client.pid not in self.listening:
                self.listening.add(client.pid)
                client.add_message_listener(self.steps)


def log_tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with path.open("rb") as stream:
            stream.seek(0, os.SEEK_END)
            size = stream.tell()
            stream.seek(max(0, size - 16384))
            text = stream.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def failure_reason(returncode: int | None, tail: Sequence[str]) -> tuple[str, str]:
    """(status, one-line reason) for a trial whose process ended early."""
    text = "\n".join(tail).lower()
    if any(marker in text for marker in OOM_MARKERS):
        line = next((text for text in reversed(tail) if "memory" in text.lower()), tail[-1] if tail else "")
        return OOM, f"out of memory: {line.strip()[:200]}"
    code = (
        f"exit status {returncode}"
        if returncode is not None and returncode >= 0
        else (f"killed by signal {-returncode}" if returncode is not None else "ended")
    )
    last = next((text for text in reversed(tail) if text.strip()), "")
    return FAILED, f"{code}: {last.strip()[:200]}" if last else code


def confirm_knobs(
    change: Mapping[str, Any], view: HookedView | None, acknowledged: Sequence[str]
) -> tuple[dict[str, str], list[str]]:
    """How each knob of `change` is known to be in effect ("hook", "script", "observed"), and the ones that are not
    (with why)."""
    knob_state = (view.state.get("knobs") if view is not None and view.state is not None else None) or {}
    applied_by_hook = knob_state.get("applied") or {}
    loaders = view.dataloaders if view is not None else []
    precision: protocol.PrecisionInfo = view.precision if view is not None else {}
    confirmed: dict[str, str] = {}
    missing: list[str] = []
    for name, value in change.items():
        if name in acknowledged:
            confirmed[name] = "script"
            continue
        if name in protocol.KNOBS:
            if applied_by_hook.get(name) != value:
                errors = "; ".join(knob_state.get("errors") or []) or "no state"
                missing.append(f"{name}: the hook did not apply it ({errors})")
                continue
            if name in ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers"):
                if not loaders:
                    missing.append(f"{name}: the job uses no DataLoader")
                    continue
                if loaders[0].get(name) != value:
                    missing.append(f"{name}: the DataLoader still shows {loaders[0].get(name)!r}")
                    continue
            confirmed[name] = "hook"
            continue
        observed = _observed(name, value, loaders, precision)
        if observed:
            confirmed[name] = "observed"
        else:
            missing.append(f"{name}: needs a code change (the command does not read it from {protocol.KNOBS_ENV})")
    return confirmed, missing


def _observed(name: str, value: Any, loaders: Sequence[Mapping[str, Any]], precision: Mapping[str, Any]) -> bool:
    if name == "amp_bf16" and value:
        autocast = precision.get("autocast")
        return (
            isinstance(autocast, Mapping)
            and bool(autocast.get("enabled"))
            and "bfloat16" in str(autocast.get("dtype", ""))
        )
    if name == "batch_size":
        return bool(loaders) and loaders[0].get("batch_size") == value
    return False


class TrialRunner:
    """Runs the command once per variant, measures it, stops it.

    launcher: makes each trial (jobs.launch.LaunchedJob). log: the sampler's SnapshotLog (GPU-Util, SM activity,
    process CPU); track: the sampler's track_pids, so each trial's processes are sampled. cancel: set it to stop the
    current trial at once (cleanly).
    """

    kind = KIND_TRIAL

    def __init__(
        self,
        command: Sequence[str],
        *,
        launcher: LaunchTrial,
        log: SnapshotLog,
        track: Callable[[list[int]], None] | None = None,
        cwd: str | None = None,
        base_env: Mapping[str, str] | None = None,
        warmup_s: float = WARMUP_S,
        window_s: float = WINDOW_S,
        repeats: int = REPEATS,
        min_repeats: int | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        stop_grace_s: float = STOP_GRACE_S,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
        on_job: JobCallback | None = None,
        log_dir: str | None = None,
        sync_diagnosis: bool = True,
        live_on_trial: bool = False,
        live_warmup_s: float = LIVE_WARMUP_S,
        live_apply_timeout_s: float = LIVE_APPLY_TIMEOUT_S,
        auto_capture: Notice | None = None,
    ) -> None:
        if not command:
            raise ValueError("a trial run needs a command")
        self.command = list(command)
        self.launcher = launcher
        self.log = log
        self.track = track
        self.cwd = cwd
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.plan = MeasurementPlan(warmup_s, window_s, repeats, min_repeats, sync_diagnosis)
        """How each trial is measured; a live change on a running trial uses the same, with its own warm-up and no
        sync count."""
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.cancel = cancel if cancel is not None else threading.Event()
        self.progress = progress
        self.on_job = on_job
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="gpumon-trials-"))
        self.live_on_trial = live_on_trial
        self.live_warmup_s = live_warmup_s
        self.live_apply_timeout_s = live_apply_timeout_s
        self.auto_capture = auto_capture
        """With it (told what happens), a measured variant of a distributed job, or one whose GPU idles with no cause
        in the step model, is also profiled for a few steps before it stops (advisor.auto_capture)."""
        self.captures: list[Capture] = []
        self.capture_errors: list[str] = []
        self.runs = 0
        """Trials started (each one a process start-up and warm-up)."""
        self.logs: list[Path] = []
        self.running: RunningTrial | None = None
        """The trial left running (live_on_trial): its knobs are the ones kept so far, or those plus the change
        being decided."""
        self.live: LiveRunner | None = None
        """Live changes on the running trial (made for it on first use)."""
        self.last_live = False
        """Whether the last variant was a live change on the running trial (keep/discard act on it)."""

    def live_plan(self) -> MeasurementPlan:
        """The plan of a live change on the running trial: the trials' windows, its own warm-up, no sync count (the
        trial's baseline counted them)."""
        return replace(self.plan, warmup_s=self.live_warmup_s, count_syncs=False)

    # -- the runner interface of the guided run -------------------------------------------------

    def supports(self, experiment: Experiment) -> str | None:
        return None

    def baseline(self) -> VariantResult:
        return self._trial("baseline", {}, {}, diagnose_syncs=self.plan.count_syncs)

    def run(self, experiment: Experiment, kept: Mapping[str, Any], against: Reference | None = None) -> VariantResult:
        knobs = {**kept, **experiment.knobs}
        self.last_live = False
        running = self.running
        on_running = running is not None and running.knobs == dict(kept)
        if self.live_on_trial and running is not None and on_running and changeable(experiment, running.script):
            result = self._live_variant(running, experiment, kept, against)
            if result.status != NOT_APPLIED:
                self.last_live = True
                return result
            self._say(f"{experiment.label}: not in effect on the running trial; a trial run instead", 0.0)
        return self._trial(
            experiment.label, dict(experiment.knobs), knobs, flags=tuple(experiment.flags), against=against
        )

    def keep(self, experiment: Experiment) -> None:
        if self.last_live and self.live is not None and self.running is not None:
            self.live.keep(experiment)
            self.running.knobs.update(experiment.knobs)

    def discard(self, experiment: Experiment) -> None:
        if self.last_live and self.live is not None:
            self.live.discard(experiment)  # rolled back on the running trial, which goes on with the kept knobs
        elif self.running is not None and any(
            self.running.knobs.get(name) == value for name, value in experiment.knobs.items()
        ):
            self._stop(self.running)  # the losing trial: the next variant starts from the kept knobs

    def finish(self, kept: Mapping[str, Any]) -> None:
        if self.live is not None:
            self.live.finish(kept)
        if self.running is not None:
            self._stop(self.running)

    def _live_variant(
        self, running: RunningTrial, experiment: Experiment, kept: Mapping[str, Any], against: Reference | None
    ) -> VariantResult:
        client = running.job.primary
        if client is None or client.ended:
            return VariantResult(
                label=experiment.label, change=dict(experiment.knobs), knobs={}, kind=KIND_TRIAL, status=NOT_APPLIED
            )
        if self.live is None or self.live.client is not client:
            self.live = LiveRunner(
                client,
                log=self.log,
                plan=self.live_plan(),
                apply_timeout_s=self.live_apply_timeout_s,
                cancel=self.cancel,
                progress=self.progress,
                script=running.script,
                restore_timeout_s=0.0,  # a trial's knobs end with it: no waiting for one that stopped answering
            )
        result = self.live.run(experiment, kept, against)
        if result.status == FAILED and running.launch.poll() is not None:
            # The change ended the trial (e.g. a batch size that does not fit): say why, as for a trial run.
            status, reason = failure_reason(running.launch.wait(), log_tail(running.out_path))
            result = replace(result, status=status, reason=f"{reason} (after the change)")
        self._say(outcome_line(result), 0.95)
        return result

    # -- one trial ------------------------------------------------------------------------------

    def _say(self, message: str, fraction: float) -> None:
        if self.progress is not None:
            try:
                self.progress(message, max(0.0, min(1.0, fraction)))
            except Exception:  # a broken progress view must not stop the run
                log.warning("the trial's progress view failed on %r", message, exc_info=True)

    def _trial(
        self,
        label: str,
        change: dict[str, Any],
        knobs: dict[str, Any],
        *,
        flags: tuple[str, ...] = (),
        diagnose_syncs: bool = False,
        against: Reference | None = None,
    ) -> VariantResult:
        entered = time.monotonic()
        if self.running is not None:
            self._stop(self.running)
        result = VariantIdentity(label=label, change=change, knobs=knobs, kind=KIND_TRIAL, flags=flags)
        if self.cancel.is_set():
            return VariantResult(**result, status=CANCELLED, reason="cancelled")
        self.runs += 1
        stem = f"trial-{self.runs:02d}"
        out_path = self.log_dir / f"{stem}.log"
        ack_path = self.log_dir / f"{stem}.ack.json"
        script = ScriptKnobs(self.log_dir / f"{stem}.live.json", self.log_dir / f"{stem}.live-ack.json")
        self.logs.append(out_path)
        try:
            launch = self.launcher(
                self.command,
                knobs=knobs,
                base_env=self.base_env,
                cwd=self.cwd,
                log=out_path,
                extra_env={KNOBS_ACK_ENV: str(ack_path), **script.env()},
            )
        except LaunchError as error:
            return VariantResult(**result, status=FAILED, reason=str(error))
        self._say(f"{label}: starting", 0.0)
        try:
            launch.start()
        except LaunchError as error:
            return VariantResult(**result, status=FAILED, reason=str(error))
        trial = RunningTrial(label, dict(knobs), launch, launch.follow(), StepLog(), out_path, ack_path, script)
        left_running = False
        try:  # from here on, whatever happens (Ctrl+C included), the trial's process group is stopped
            trial.job.start(trial.attach_listener)
            if self.track is not None:
                self.track([launch.pid])
            if self.on_job is not None:
                self.on_job(trial.job, label)
            variant = self._measure(trial, result, diagnose_syncs, entered, against)
            self._say(outcome_line(variant), 0.95)
            left_running = self.live_on_trial and variant.status == OK
            return variant
        finally:
            if left_running:
                self.running = trial
            else:
                self._stop(trial)

    def _stop(self, trial: RunningTrial) -> None:
        if self.running is trial:
            self.running = None
            self.live = None
        self._say(f"{trial.label}: stopping", 1.0)
        try:
            trial.launch.stop(self.stop_grace_s)
        finally:
            trial.launch.close()
            trial.job.stop()
            if self.on_job is not None:
                self.on_job(None, trial.label)

    def _measure(
        self,
        trial: RunningTrial,
        result: VariantIdentity,
        diagnose_syncs: bool,
        entered: float,
        against: Reference | None,
    ) -> VariantResult:
        launch, job, steps, attach_listener = trial.launch, trial.job, trial.steps, trial.attach_listener
        out_path, ack_path = trial.out_path, trial.ack_path
        label = result["label"]
        result = VariantIdentity(**result, pid=launch.pid)

        def alive() -> str | None:
            attach_listener()
            return "ended" if launch.poll() is not None else None

        def ended_early(stage: str) -> VariantResult:
            status, reason = failure_reason(launch.wait(), log_tail(out_path))
            view = job.view() if job.clients else None
            if view is not None and view.memory and (view.memory.get("ooms") or 0) > 0:
                status = OOM
            return VariantResult(**result, status=status, reason=f"{reason} ({stage})")

        # Progress fractions of one variant: start-up to 0.15, warm-up to 0.3, the windows to 0.9.
        try:
            started = time.monotonic()
            while steps.steps == 0:
                self._say(f"{label}: waiting for the first step", 0.05)
                if time.monotonic() - started > self.startup_timeout_s:
                    return VariantResult(
                        **result, status=TIMEOUT, reason=f"no training step within {self.startup_timeout_s:g} s"
                    )
                try:
                    sleep_checked(0.2, self.cancel, alive)
                except RuntimeError:
                    return ended_early("before its first step")
            first = steps.steps
            first_step_at = time.monotonic()
            self._say(f"{label}: warming up", 0.15)
            sleep_checked(self.plan.warmup_s, self.cancel, alive)
            deadline = time.monotonic() + max(30.0, self.startup_timeout_s)
            while steps.steps - first < WARMUP_STEPS and time.monotonic() < deadline:
                sleep_checked(0.2, self.cancel, alive)
            measure_start = time.time()
            warmed_at = time.monotonic()
            windows = self.plan.windows(
                steps,
                cancel=self.cancel,
                alive=alive,
                progress=self._say,
                label=label,
                done_before=0.3,
                share=0.6,
                against=against,
            )
            measure_end = time.time()
            measured_at = time.monotonic()
            client = job.primary
            view = client.view() if client is not None else None
            diagnosis = None
            if diagnose_syncs and client is not None and view is not None and view.cuda.get("initialized"):
                self._say(f"{label}: counting host syncs", 0.92)
                diagnosis = self.plan.sync_count(client.diagnose)
        except Cancelled:
            return VariantResult(**result, status=CANCELLED, reason="cancelled")
        except RuntimeError:
            return ended_early("while it was measured")
        acknowledged = _read_ack(ack_path)
        confirmed, missing = confirm_knobs(result["change"], view, acknowledged)
        snapshots = self.log.between(measure_start, measure_end)
        signals = build_signals(
            snapshots,
            view,
            pid=view.pid if view is not None else launch.pid,
            start=measure_start,
            end=measure_end,
            diagnosis=diagnosis,
        )
        if self.auto_capture is not None and client is not None and launch.poll() is None:
            world = view.info.world_size if view is not None and view.info is not None else None
            reason = capture_reason(signals, world)
            if reason is not None:
                self._say(f"{label}: profiling {AUTO_CAPTURE_STEPS} steps", 0.95)
                signals, captured, error = with_capture(signals, client, reason, self.auto_capture)
                if captured is not None:
                    self.captures.append(captured)
                if error is not None:
                    self.capture_errors.append(error)
        memory = view.memory if view is not None else None
        measurement = measurement_from(
            windows,
            gpu_util=signals.gpu.gpu_util,
            sm_activity=signals.gpu.sm_activity,
            tensor_activity=signals.gpu.tensor_activity,
            peak_memory=memory.get("max_allocated") if memory else None,
            stopped=self.plan.why_stopped(windows, against),
        )
        measurement = with_efficiency(measurement, snapshots, signals, view)
        status, reason = OK, ""
        if not measurement.steps:
            status, reason = TIMEOUT, f"no step during the {measurement.seconds:.0f} s measured (the job stalled)"
        elif missing:
            status, reason = NOT_APPLIED, "; ".join(missing)
        if memory and (memory.get("ooms") or 0) > 0:
            status, reason = OOM, f"{memory.get('ooms')} CUDA out-of-memory error(s) during the trial"
        if view is not None:
            result = VariantIdentity(**{**result, "pid": view.pid})
        phases = {
            "start": first_step_at - entered,
            "warmup": warmed_at - first_step_at,
            "measure": measured_at - warmed_at,
            "after": time.monotonic() - measured_at,
        }
        return VariantResult(
            **result,
            status=status,
            reason=reason,
            measurement=measurement,
            signals=signals,
            applied=confirmed,
            phases=phases,
        )


def outcome_line(variant: VariantResult) -> str:
    """One line of what a variant measured, said as soon as it is known (a cut-short run still shows it)."""
    measurement = variant.measurement
    if variant.status != OK or measurement is None:
        return f"{variant.label}: {variant.status}{': ' + variant.reason if variant.reason else ''}"
    parts = [f"{measurement.rate:,.1f} {measurement.unit} ±{measurement.noise:.1%}"]
    if measurement.gpu_util is not None:
        parts.append(f"GPU-Util {measurement.gpu_util:.0f}%")
    if measurement.sm_activity is not None:
        parts.append(f"SM activity {measurement.sm_activity:.0f}%")
    return f"{variant.label}: measured {', '.join(parts)}"


def _read_ack(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(name) for name in data] if isinstance(data, list) else []
