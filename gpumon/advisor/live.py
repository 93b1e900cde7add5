"""Live experiments: change a math-neutral knob on the attached job through its hook, measure, roll back if slower.

Only knobs the protocol marks live (DataLoader workers, prefetching, pinning, persistent workers, cuDNN
autotuning) are changed; the others need a trial run. DataLoader knobs take effect at the job's next
iter(DataLoader) (its next epoch): a change that has not taken effect within `apply_timeout_s` is rolled back.
Every change is undone when it loses, fails, or the run is cancelled, so the job ends as it started unless a
change won. A job that does not answer the rollback (stopped with SIGSTOP, stuck) is asked again at the run's end,
less and less often, for up to `restore_timeout_s`; what it still has not taken back is listed (`unrestored`).

On a trial run whose script answers GPUMON_KNOBS_LIVE (script_knobs.py), the knobs it says it can change while it
runs (the demo: batch size, bf16 autocast, channels_last, log_every) are asked of the script instead; the hook's
live knobs still go through the hook.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from gpumon import protocol
from gpumon.advisor.catalogue import OWNER_KNOBS, Experiment
from gpumon.advisor.efficiency import with_efficiency
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
    KIND_LIVE,
    NOT_APPLIED,
    OK,
    Unrestored,
    VariantIdentity,
    VariantResult,
)
from gpumon.advisor.script_knobs import ScriptKnobs, ScriptRefused
from gpumon.advisor.signals import build_signals
from gpumon.jobs.job_control import HookRequests, JobRequestError
from gpumon.jobs.jobstate import HookedView

log = logging.getLogger(__name__)

LOADER_KNOBS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
APPLY_TIMEOUT_S = 90.0
WARMUP_S = 3.0
WINDOW_S = 4.0
REPEATS = 3
ANSWER_TIMEOUT_S = 5.0
"""How long one knob change waits for the job's acknowledgement."""
RESTORE_TIMEOUT_S = 120.0
"""How long the run's end keeps asking a job that stopped answering (SIGSTOP, a long stall) to take its knobs back."""
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
"""A rollback the job did not answer is asked again after 0.5 s, then twice as long each time, at most 5 s apart."""


def current_value(view: HookedView, name: str) -> Any:
    """The value a live knob has in the job now, as its hook's state shows it (None when not shown)."""
    if name in LOADER_KNOBS:
        loaders = view.dataloaders
        return loaders[0].get(name) if loaders else None
    if name == "cudnn_benchmark":
        return view.precision.get("cudnn_benchmark")
    if name in OWNER_KNOBS:  # held by the hook alone: off until set (its state's applied knobs)
        knobs = view.state.get("knobs") if view.state is not None else None
        return bool((knobs or {}).get("applied", {}).get(name, False))
    return None


def by_hook(name: str) -> bool:
    """Whether the hook itself changes knob `name` on a running job."""
    spec = protocol.KNOBS.get(name)
    return spec is not None and spec["live"]


def changeable(experiment: Experiment, script: ScriptKnobs | None) -> bool:
    """Whether every knob of `experiment` can be changed on the running job: by its hook, or by the trial's script."""
    by_script = script.live() if script is not None else frozenset()
    return all(by_hook(name) or name in by_script for name in experiment.knobs)


def in_effect(view: HookedView, knobs: Mapping[str, Any]) -> bool:
    for name, value in knobs.items():
        if name == "prefetch_factor" and not current_value(view, "num_workers"):
            continue  # without workers there is nothing to prefetch: the loader shows None
        if current_value(view, name) != value:
            return False
    return True


class LiveRunner:
    """Experiments on a running hooked job (its primary rank's client)."""

    kind = KIND_LIVE

    def __init__(
        self,
        client: HookRequests,
        *,
        log: SnapshotLog,
        warmup_s: float = WARMUP_S,
        window_s: float = WINDOW_S,
        repeats: int = REPEATS,
        min_repeats: int | None = None,
        apply_timeout_s: float = APPLY_TIMEOUT_S,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
        sync_diagnosis: bool = True,
        plan: MeasurementPlan | None = None,
        script: ScriptKnobs | None = None,
        answer_timeout_s: float = ANSWER_TIMEOUT_S,
        restore_timeout_s: float = RESTORE_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.script = script
        """The trial's script knobs (None on a job gpumon attached to: the hook's live knobs only)."""
        self.log = log
        self.plan = plan or MeasurementPlan(warmup_s, window_s, repeats, min_repeats, sync_diagnosis)
        """How each variant is measured (`plan` given: the trial runner's own, for live changes on its trial)."""
        self.apply_timeout_s = apply_timeout_s
        self.answer_timeout_s = answer_timeout_s
        self.restore_timeout_s = restore_timeout_s
        self.cancel = cancel if cancel is not None else threading.Event()
        self.progress = progress
        self.steps = StepLog()
        client.add_message_listener(self.steps)
        self.original: dict[str, Any] = {}
        """Each changed knob's value before the first change, or the value last kept (a climb's step): what a
        rollback restores."""
        self.changed: set[str] = set()
        """Knobs currently changed and not (yet) kept."""
        self.restoring: dict[str, Any] = {}
        """Values a rollback asked for: the next variant is measured only once they are in effect too."""
        self.asked: dict[str, Any] = {}
        """The value each knob was last changed to: what the job has, as far as gpumon knows."""
        self._unrestored: dict[str, Unrestored] = {}
        """Rollbacks the job has not acknowledged, by knob."""
        self.loader_waits: str | None = None
        """Why DataLoader knobs are not tried live any more: one did not take effect within its window."""

    def _say(self, message: str, fraction: float) -> None:
        if self.progress is not None:
            try:
                self.progress(message, max(0.0, min(1.0, fraction)))
            except Exception:  # a broken progress view must not stop the experiment
                log.warning("the experiment's progress view failed on %r", message, exc_info=True)

    def _gone(self) -> bool:
        return self.client.ended

    def _alive(self) -> str | None:
        return f"the job ended ({self.client.view().end_reason})" if self.client.ended else None

    def supports(self, experiment: Experiment) -> str | None:
        if self.loader_waits is not None and set(experiment.knobs) & set(LOADER_KNOBS):
            return self.loader_waits
        if changeable(experiment, self.script):
            return None
        return "needs a trial run: it changes numerics or needs a restart (gpumon experiment -- CMD)"

    def _split(self, knobs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the knobs the hook changes, the ones the trial's script changes)."""
        hook = {name: value for name, value in knobs.items() if self.script is None or by_hook(name)}
        return hook, {name: value for name, value in knobs.items() if name not in hook}

    def _current(self, view: HookedView, name: str) -> Any:
        if self.script is not None and not by_hook(name):
            return self.script.values().get(name)
        return current_value(view, name)

    def _set(self, knobs: Mapping[str, Any], timeout: float | None = None) -> None:
        hook, script = self._split(knobs)
        if hook:
            self.client.set_knobs(hook, timeout=self.answer_timeout_s if timeout is None else timeout)
        if script and self.script is not None:
            self.script.request(script)

    def _in_effect(self, knobs: Mapping[str, Any]) -> bool:
        hook, script = self._split(knobs)
        if hook and not in_effect(self.client.view(), hook):
            return False
        return self.script is None or self.script.in_effect(script)

    def _measure(
        self,
        label: str,
        change: dict[str, Any],
        knobs: dict[str, Any],
        *,
        diagnose_syncs: bool = False,
        flags: tuple[str, ...] = (),
        phases: Mapping[str, float] | None = None,
        against: Reference | None = None,
    ) -> VariantResult:
        result = VariantIdentity(
            label=label, change=change, knobs=knobs, kind=KIND_LIVE, flags=flags, pid=self.client.pid
        )
        self._say(f"{label}: warming up", 0.2)
        plan = self.plan
        began = time.monotonic()
        sleep_checked(plan.warmup_s, self.cancel, self._alive)
        warmed_at = time.monotonic()
        start = time.time()
        windows = plan.windows(
            self.steps,
            cancel=self.cancel,
            alive=self._alive,
            progress=self._say,
            label=label,
            done_before=0.3,
            share=0.6,
            against=against,
        )
        end = time.time()
        measured_at = time.monotonic()
        view = self.client.view()
        diagnosis = None
        if diagnose_syncs and view.cuda.get("initialized"):
            self._say(f"{label}: counting host syncs", 0.92)
            diagnosis = plan.sync_count(self.client.diagnose)
        signals = build_signals(self.log.between(start, end), view, start=start, end=end, diagnosis=diagnosis)
        memory = view.memory
        measurement = measurement_from(
            windows,
            gpu_util=signals.gpu.gpu_util,
            sm_activity=signals.gpu.sm_activity,
            tensor_activity=signals.gpu.tensor_activity,
            peak_memory=memory.get("max_allocated") if memory else None,
            stopped=plan.why_stopped(windows, against),
        )
        measurement = with_efficiency(measurement, self.log.between(start, end), signals, view)
        timing = {
            **(phases or {}),
            "warmup": warmed_at - began,
            "measure": measured_at - warmed_at,
            "after": time.monotonic() - measured_at,
        }
        if not measurement.steps:
            return VariantResult(
                **result,
                status=FAILED,
                measurement=measurement,
                signals=signals,
                reason=f"no step during the {measurement.seconds:.0f} s measured (the job stalled)",
                phases=timing,
            )
        return VariantResult(**result, status=OK, measurement=measurement, signals=signals, phases=timing)

    def baseline(self) -> VariantResult:
        try:
            self._say("baseline: waiting for steps", 0.05)
            deadline = time.monotonic() + self.apply_timeout_s
            while self.steps.steps == 0:
                if time.monotonic() > deadline:
                    return VariantResult(
                        label="baseline",
                        change={},
                        knobs={},
                        kind=KIND_LIVE,
                        status=FAILED,
                        reason=f"no step from the job within {self.apply_timeout_s:g} s",
                    )
                sleep_checked(0.2, self.cancel, self._alive)
            return self._measure("baseline", {}, {}, diagnose_syncs=self.plan.count_syncs)
        except Cancelled:
            return VariantResult(
                label="baseline", change={}, knobs={}, kind=KIND_LIVE, status=CANCELLED, reason="cancelled"
            )
        except RuntimeError as error:
            return VariantResult(
                label="baseline", change={}, knobs={}, kind=KIND_LIVE, status=FAILED, reason=str(error)
            )

    def run(self, experiment: Experiment, kept: Mapping[str, Any], against: Reference | None = None) -> VariantResult:
        change = dict(experiment.knobs)
        label = experiment.label
        base = VariantIdentity(
            label=label,
            change=change,
            knobs={**kept, **change},
            kind=KIND_LIVE,
            flags=tuple(experiment.flags),
            pid=self.client.pid,
        )
        view = self.client.view()
        for name in change:
            self.original.setdefault(name, self._current(view, name))
        try:
            self._say(f"{label}: setting it on pid {self.client.pid}", 0.05)
            asked_at = time.monotonic()
            self.asked.update(change)
            self._set(change)
            self.changed.update(change)
            wanted = {**{k: v for k, v in self.restoring.items() if v is not None and k not in change}, **change}
            deadline = time.monotonic() + self.apply_timeout_s
            while not self._in_effect(wanted):
                if time.monotonic() > deadline:
                    self.restoring = {}
                    self.discard(experiment)
                    if set(change) & set(LOADER_KNOBS):
                        self.loader_waits = (
                            f"not tried live: DataLoader settings apply at the job's next epoch, which did not "
                            f"come within {self.apply_timeout_s:g} s"
                        )
                    return VariantResult(
                        **base,
                        status=NOT_APPLIED,
                        reason=(
                            f"not in effect within {self.apply_timeout_s:g} s (DataLoader settings apply at the next "
                            "epoch): rolled back; a trial run can measure it"
                        ),
                    )
                self._say(f"{label}: waiting for it to take effect (next epoch)", 0.1)
                sleep_checked(0.25, self.cancel, self._alive)
            self.restoring = {}
            by_the_hook = self._split(change)[0]
            measured = self._measure(
                label,
                change,
                {**kept, **change},
                flags=tuple(experiment.flags),
                phases={"apply": time.monotonic() - asked_at},
                against=against,
            )
            return VariantResult(
                **base,
                status=measured.status,
                reason=measured.reason or experiment.owner,
                measurement=measured.measurement,
                signals=measured.signals,
                applied={name: "hook" if name in by_the_hook else "script" for name in change},
                phases=measured.phases,
            )
        except Cancelled:
            self.discard(experiment)
            return VariantResult(**base, status=CANCELLED, reason="cancelled (rolled back)")
        except (JobRequestError, ScriptRefused, OSError) as error:
            self.discard(experiment)
            return VariantResult(**base, status=FAILED, reason=f"the job refused it: {error}")
        except RuntimeError as error:
            return VariantResult(**base, status=FAILED, reason=str(error))

    def keep(self, experiment: Experiment) -> None:
        self.changed.difference_update(experiment.knobs)
        self.original.update(experiment.knobs)  # a later step that loses goes back to this value (num_workers 4 -> 8)

    def discard(self, experiment: Experiment) -> None:
        """Put the experiment's knobs back to their values before the change (the job's own, or the last kept)."""
        restore = {name: self.original.get(name) for name in experiment.knobs if name in self.changed}
        restore = {name: value for name, value in restore.items() if value is not None or name == "prefetch_factor"}
        self.changed.difference_update(experiment.knobs)
        if not restore or self.client.ended:
            return
        self.restoring.update(restore)
        seen = self.client.view()
        try:
            self._set(restore)
        except (JobRequestError, ScriptRefused, OSError):
            if self._gone():
                return  # the job went away; nothing left to restore
            for name, value in restore.items():
                left = self._current(seen, name)
                left = self.asked.get(name) if left is None or left == value else left
                self._unrestored[name] = Unrestored(name, left=left, should_be=value)
            return
        for name in restore:
            self._unrestored.pop(name, None)

    def unrestored(self) -> tuple[Unrestored, ...]:
        """Knobs whose rollback the job has not acknowledged (it stopped answering)."""
        return tuple(self._unrestored.values())

    def finish(self, kept: Mapping[str, Any]) -> None:
        """Roll back anything still changed and not kept (a run cut short); ask a job that did not answer a rollback
        again, for up to `restore_timeout_s`."""
        pending = {name for name in self.changed if name not in kept}
        if pending:
            self.discard(Experiment(knobs={name: None for name in pending}))
        self._retry_restores()

    def _retry_restores(self) -> None:
        deadline = time.monotonic() + self.restore_timeout_s
        pause = RETRY_FIRST_S
        while self._unrestored and not self._gone():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            names = ", ".join(self._unrestored)
            self._say(f"pid {self.client.pid} does not answer: asking it again to put back {names}", 1.0)
            time.sleep(min(pause, left))
            pause = min(2 * pause, RETRY_MAX_S)
            wanted = {name: knob.should_be for name, knob in self._unrestored.items()}
            try:
                self._set(wanted, timeout=max(0.1, min(self.answer_timeout_s, deadline - time.monotonic())))
            except (JobRequestError, ScriptRefused, OSError):
                continue
            self._say(f"pid {self.client.pid} answered: {names} put back", 1.0)
            self._unrestored.clear()
        if self._gone():
            self._unrestored.clear()  # the job is gone, and its knobs with it
