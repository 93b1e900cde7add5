"""Headless advisor sessions: diagnose a command or a running pid, run experiments; what the CLI calls.

Each session samples the machine with its own Sampler (into a SnapshotLog) for as long as it runs and stops it at
the end, whatever happens.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpumon.advisor.auto_capture import Notice, capture_reason, with_capture
from gpumon.advisor.capture import Capture, CaptureError, capture
from gpumon.advisor.catalogue import Experiment
from gpumon.advisor.guided import GuidedRun, JobCommand, Listener, Planner
from gpumon.advisor.live import ANSWER_TIMEOUT_S, RESTORE_TIMEOUT_S, LiveRunner
from gpumon.advisor.measure import DIAGNOSIS_STEPS, Progress, SnapshotLog, sleep_checked
from gpumon.advisor.results import GuidedReport
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import Signals, build_signals, steps_in_window
from gpumon.advisor.trial import TrialRunner
from gpumon.jobs.job_control import (
    AttachError,
    AttachHooked,
    JobRequestError,
    LaunchTrial,
    NoHook,
    OpenJob,
    WatchedJob,
)

SAMPLE_INTERVAL = 0.5
MIN_STEPS_FOR_RECORDS_NOTE = 2
"""Steps the hook must have closed in a window without a record arriving before the diagnosis says so."""
LIVE_NEEDS_HOOK = "live experiments need it (`import gpumon.hook`, or `gpumon experiment -- CMD` for trial runs)"


class AdvisorError(Exception):
    """A session that cannot be done (bad pid, a command that never trains...): one line for the user."""


@contextlib.contextmanager
def sampling(interval: float = SAMPLE_INTERVAL, pids: Sequence[int] = ()) -> Iterator[tuple[Any, SnapshotLog]]:
    """A started Sampler feeding a SnapshotLog; stopped (NVML released) on the way out."""
    from gpumon.sampling.sampler import Sampler

    log = SnapshotLog()
    sampler = Sampler(interval=interval, slow_interval=max(1.0, interval), extra_pids=pids)
    sampler.start(log)
    try:
        yield sampler, log
    finally:
        sampler.stop()


@dataclass(frozen=True, slots=True)
class Diagnosis:
    finding: Finding
    signals: Signals
    pid: int | None = None
    command: str = ""
    capture: Capture | None = None
    """The profiler capture asked for (diagnose --profile), when it worked."""
    capture_error: str | None = None
    """Why the capture asked for did not work (one line)."""
    exited_after_s: float | None = None
    """Seconds into the watched window the job exited (diagnose --pid); None when it ran through it."""
    steps_closed: int | None = None
    """Steps the hook said it closed during the window (its state's last_seq, end minus start); None: not known."""
    step_records: int | None = None
    """Step records that reached gpumon for the window."""

    @property
    def exit_note(self) -> str | None:
        """One line when the job died during the window: the finding covers only the time before."""
        if self.exited_after_s is None:
            return None
        return f"the job exited {self.exited_after_s:.0f} s into the window: the finding covers only that time"

    @property
    def records_note(self) -> str | None:
        """One line when the hook closed steps in the window but no step record of them reached gpumon: the finding
        then has no step times, copies or syncs, only the samples, NVML and the state's totals."""
        if not self.steps_closed or self.steps_closed < MIN_STEPS_FOR_RECORDS_NOTE or self.step_records:
            return None
        return (
            f"the hook closed {self.steps_closed} steps in the window but no step record of them reached gpumon: "
            "step times, copies and syncs are not in this finding (the samples, NVML and the collector's totals are)"
        )

    def to_dict(self) -> dict[str, Any]:
        data = {
            "finding": self.finding.to_dict(),
            "signals": self.signals.to_dict(),
            "pid": self.pid,
            "command": self.command,
            "job_exited_after_s": None if self.exited_after_s is None else round(self.exited_after_s, 1),
            "steps_closed_in_window": self.steps_closed,
            "step_records_in_window": self.step_records,
        }
        if self.capture is not None:
            data["capture"] = self.capture.to_dict()
        if self.capture_error is not None:
            data["capture_error"] = self.capture_error
        return data


def windows_for(duration: float, warmup_s: float) -> tuple[float, int]:
    """(window length, repeats) that fill `duration` seconds after the warm-up, in 3 windows when there is room."""
    measured = max(1.0, duration - warmup_s)
    repeats = 3 if measured >= 3 else 1
    return measured / repeats, repeats


def diagnose_command(
    command: Sequence[str],
    *,
    launcher: LaunchTrial,
    duration: float = 20.0,
    warmup_s: float = 5.0,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 180.0,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    notice: Notice | None = None,
) -> Diagnosis:
    """Run `command` hooked (made by `launcher`: jobs.launch.LaunchedJob), measure it for `duration` seconds after
    its first step (warm-up included), stop it and diagnose it. With `notice`, a distributed job or one whose GPU
    idles with no cause in the step model is also profiled for a few steps first (told through `notice`). Raises
    AdvisorError when it could not be measured."""
    window_s, repeats = windows_for(duration, warmup_s)
    with sampling() as (sampler, log):
        runner = TrialRunner(
            command,
            launcher=launcher,
            log=log,
            track=sampler.track_pids,
            cwd=cwd,
            base_env=env,
            warmup_s=min(warmup_s, duration / 2),
            window_s=window_s,
            repeats=repeats,
            startup_timeout_s=startup_timeout_s,
            cancel=cancel,
            progress=progress,
            auto_capture=notice,
        )
        result = runner.baseline()
    if not result.ok or result.signals is None:
        logs = f" (its output: {runner.logs[-1]})" if runner.logs else ""
        raise AdvisorError(f"could not measure `{' '.join(command)}`: {result.reason or result.status}{logs}")
    return Diagnosis(
        diagnose(result.signals),
        result.signals,
        pid=result.pid,
        command=" ".join(command),
        capture=runner.captures[-1] if runner.captures else None,
        capture_error=runner.capture_errors[-1] if runner.capture_errors else None,
    )


def diagnose_pid(
    pid: int,
    *,
    opener: OpenJob,
    duration: float = 20.0,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    native: bool = False,
    profile_steps: int = 0,
    trace_dir: str | None = None,
    notice: Notice | None = None,
) -> Diagnosis:
    """Watch a running job for `duration` seconds and diagnose it; `opener` opens it (jobs.session.open_job: its
    hook, else py-spy, with --native if `native`).

    profile_steps: also capture that many steps with torch.profiler (hooked jobs; its NCCL figures feed comm_bound).
    notice: without profile_steps, a hooked job that is distributed or whose GPU idles with no cause in the step
    model is profiled for a few steps anyway (advisor.auto_capture), told through `notice`.
    """
    try:
        job = opener(pid, native=native)
    except AttachError as error:
        raise AdvisorError(str(error)) from None
    cancel = cancel if cancel is not None else threading.Event()
    with sampling(pids=[pid]) as (_sampler, log):
        job.start()
        start = time.time()
        exited_after: float | None = None
        first_seq: int | None = None
        try:
            began = time.monotonic()
            deadline = began + duration
            while (left := deadline - time.monotonic()) > 0:
                if progress is not None:
                    progress(f"watching pid {pid}", 1.0 - left / duration)
                sleep_checked(min(0.5, left), cancel, None)
                if first_seq is None and job.primary is not None:
                    first_seq = _hook_last_seq(job.primary.view())
                if job.ended:
                    exited_after = time.monotonic() - began
                    break
            end = time.time()
            diagnosis = None
            view: Any
            client = job.primary
            view = job.view()
            hooked = client.view() if client is not None else None
            last_seq = _hook_last_seq(hooked) if hooked is not None else None
            closed = last_seq - first_seq if last_seq is not None and first_seq is not None else None
            records = len(steps_in_window(hooked.steps, start, end)) if hooked is not None else None
            if client is not None and hooked is not None and hooked.cuda.get("initialized") and not job.ended:
                if progress is not None:
                    progress(f"counting host syncs of pid {pid}", 0.95)
                try:
                    diagnosis = client.diagnose(DIAGNOSIS_STEPS, timeout=20.0)
                except JobRequestError:
                    diagnosis = None
            signals = build_signals(log.between(start, end), view, pid=pid, start=start, end=end, diagnosis=diagnosis)
            captured, capture_error = _profile(job, pid, profile_steps, trace_dir, progress)
            if captured is not None:
                signals = replace(signals, comm=replace(signals.comm, **captured.summary.signal_values()))
            elif not profile_steps and notice is not None and client is not None and hooked is not None:
                world = hooked.info.world_size if hooked.info is not None else None
                reason = capture_reason(signals, world)
                if reason is not None and not job.ended:
                    signals, captured, capture_error = with_capture(signals, client, reason, notice, trace_dir)
        finally:
            job.stop()
    return Diagnosis(
        diagnose(signals),
        signals,
        pid=pid,
        command=signals.command,
        capture=captured,
        capture_error=capture_error,
        exited_after_s=exited_after,
        steps_closed=closed,
        step_records=records,
    )


def _hook_last_seq(view: Any) -> int | None:
    """The last step the hook's newest state says it closed; None before a state arrived."""
    state = getattr(view, "state", None)
    value = state.get("last_seq") if isinstance(state, Mapping) else None
    return value if isinstance(value, int) else None


def _profile(
    job: WatchedJob, pid: int, steps: int, trace_dir: str | None, progress: Progress | None
) -> tuple[Capture | None, str | None]:
    """(the profiler capture, or why there is none); (None, None) when none was asked for."""
    if not steps:
        return None, None
    client = job.primary
    if client is None:
        return None, f"pid {pid}: no profiler capture: the job has no gpumon hook"
    if job.ended:
        return None, f"pid {pid}: no profiler capture: the job ended"
    if progress is not None:
        progress(f"profiling {steps} steps of pid {pid}", 0.97)
    try:
        return capture(client, steps, directory=trace_dir), None
    except CaptureError as error:
        return None, str(error)


def experiment_command(
    command: Sequence[str],
    *,
    launcher: LaunchTrial,
    window_s: float = 4.0,
    repeats: int = 3,
    warmup_s: float = 5.0,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    only: Sequence[Experiment] | None = None,
    startup_timeout_s: float = 180.0,
    progress: Progress | None = None,
    listener: Listener | None = None,
    cancel: threading.Event | None = None,
    max_variants: int = 12,
    on_job: Any = None,
    min_repeats: int | None = None,
    live_on_trial: bool = False,
    planner: Planner | None = None,
) -> GuidedReport:
    """The guided run over trial runs of `command` made by `launcher` (jobs.launch.LaunchedJob), or the `only`
    experiments, in order. min_repeats: measure adaptively, from that many windows up to `repeats`; live_on_trial:
    math-neutral knobs tried on the running trial through its hook instead of a restart (TrialRunner); planner: what
    to try next (default: the catalogue's plan for the finding; benchmarks/guided_vs_sweep.py narrows it to one knob,
    its climb kept)."""
    cancel = cancel if cancel is not None else threading.Event()
    with sampling() as (sampler, log):
        runner = TrialRunner(
            command,
            launcher=launcher,
            log=log,
            track=sampler.track_pids,
            cwd=cwd,
            base_env=env,
            warmup_s=warmup_s,
            window_s=window_s,
            repeats=repeats,
            min_repeats=min_repeats,
            startup_timeout_s=startup_timeout_s,
            cancel=cancel,
            progress=progress,
            on_job=on_job,
            live_on_trial=live_on_trial,
        )
        guided = GuidedRun(
            runner,
            planner=planner,
            cancel=cancel,
            listener=listener,
            only=only,
            max_variants=max_variants,
            meta={"command": " ".join(command), "logs": str(runner.log_dir)},
        )
        return guided.run()


def experiment_pid(
    pid: int,
    *,
    attach: AttachHooked,
    window_s: float = 4.0,
    repeats: int = 3,
    warmup_s: float = 3.0,
    only: Sequence[Experiment] | None = None,
    progress: Progress | None = None,
    listener: Listener | None = None,
    cancel: threading.Event | None = None,
    max_variants: int = 12,
    answer_timeout_s: float = ANSWER_TIMEOUT_S,
    restore_timeout_s: float = RESTORE_TIMEOUT_S,
) -> GuidedReport:
    """The guided run as live experiments on a running hooked job, connected by `attach` (jobs.session.hooked_job):
    math-neutral knobs only, rolled back unless they win; the report lists any the job did not take back
    (LiveRunner)."""
    try:
        job = attach(pid)
    except NoHook as error:
        raise AdvisorError(f"{error}: {LIVE_NEEDS_HOOK}") from None
    except AttachError as error:
        raise AdvisorError(str(error)) from None
    client = job.primary
    if client is None:
        raise AdvisorError(f"pid {pid} has no gpumon hook: {LIVE_NEEDS_HOOK}")
    cancel = cancel if cancel is not None else threading.Event()
    with sampling(pids=[pid]) as (_sampler, log):
        runner = LiveRunner(
            client,
            log=log,
            warmup_s=warmup_s,
            window_s=window_s,
            repeats=repeats,
            cancel=cancel,
            progress=progress,
            answer_timeout_s=answer_timeout_s,
            restore_timeout_s=restore_timeout_s,
        )
        job.start()
        try:
            info = client.view().info
            guided = GuidedRun(
                runner,
                cancel=cancel,
                listener=listener,
                only=only,
                max_variants=max_variants,
                meta={"command": job.view().command, "pid": pid},
                job_command=JobCommand.from_hello(info.hello if info is not None else None),
            )
            return guided.run()
        finally:
            job.stop()
