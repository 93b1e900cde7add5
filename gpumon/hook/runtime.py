"""The hook's state inside the training process: step detection, per-step records, knobs, diagnosis.

Every method named `on_*` is called from a patched torch function on the training thread. They only
do arithmetic and append to bounded structures; the server thread reads those structures and never
calls back in here except through the `control` queue, which is drained at step boundaries. What each step
boundary does (budget, GPU timing, FLOP count, CUDA probe, and the next boundary with any of them) is planned by
gpumon.hook.schedule, a pure function of the step number, the settings and the recent step times: the runtime
executes the plan and holds the state.
"""

from __future__ import annotations

import dataclasses
import math
import time
import weakref
from collections import deque
from collections.abc import Callable
from threading import get_ident
from typing import Any

from gpumon import protocol
from gpumon.hook.allocator import EmptyCacheCounter
from gpumon.hook.batch import count_samples
from gpumon.hook.budget import BUDGET_EVERY, BUDGET_MIN_GAP_S, BudgetMeter
from gpumon.hook.diagnosis import SyncDiagnosis
from gpumon.hook.env import env_count_given
from gpumon.hook.flops import FlopSampler
from gpumon.hook.gc_timer import GcTimer
from gpumon.hook.gpu_timer import GpuStepTimer
from gpumon.hook.knob_state import KnobState, apply_dataloader_knobs
from gpumon.hook.loader_rebuild import LOADER_SETTINGS, not_live_reason, take_over
from gpumon.hook.nvtx import DATA_WAIT, NvtxRanges, nvtx_requested
from gpumon.hook.profiler_capture import ProfilerCapture
from gpumon.hook.schedule import GPU_TIMING_EVERY, GPU_TIMING_MIN_GAP_S, NO_CANDIDATE, BoundaryPlan, Schedule

MAX_RECORDS = 4096
MAX_LOADERS = 8
MAX_ITERATORS = 16
LEAD_SWITCH_AFTER = 64
"""Steps of other optimizers, none of the lead's, after which the lead optimizer is replaced."""
LEAD_SILENT_S = 1.0
"""A lead optimizer silent this long is replaced by another after two of that one's steps: a warm-up optimizer (a
graph capture's, a learning-rate finder's) stepped a few times at the start must not hold the steps of a job that
steps a few times a second for LEAD_SWITCH_AFTER of them (8-32 s without a step record on the H200, 2026-11-29)."""
LEAD_SWITCH_SOON = 2
"""Steps of another optimizer that replace a silent lead (one alone could be a one-off optimizer's)."""
MAX_OPTIMIZERS = 8
"""Optimizers described in the state (the first ones seen)."""
MAX_PARAMS_WALKED = 100_000
"""Parameters looked at once per optimizer to tell where they live."""
PROFILE_EXIT_WAIT_S = 10.0
"""At exit inside a profiler capture, how long the exit waits for its trace to be written."""

# Layout of a step record (a list, so the GPU time can be filled in after the fact).
R_SEQ, R_END, R_WALL, R_DATA, R_SAMPLES, R_GPU, R_SYNCS, R_SOURCE, R_BUDGET, R_COMM = range(10)


class LoaderEntry:
    """What the hook knows about one DataLoader: its settings, worker pids and fetch totals."""

    __slots__ = (
        "batch_size",
        "batches",
        "dataset",
        "drop_last",
        "id",
        "last_used",
        "not_live",
        "num_workers",
        "persistent_workers",
        "pin_memory",
        "prefetch_factor",
        "wait_s",
        "worker_pids",
    )

    def __init__(self, loader_id: int) -> None:
        self.id = loader_id
        self.dataset = ""
        self.batch_size: int | None = None
        self.num_workers = 0
        self.pin_memory = False
        self.prefetch_factor: int | None = None
        self.persistent_workers = False
        self.drop_last = False
        self.worker_pids: list[int] = []
        self.batches = 0
        self.wait_s = 0.0
        self.last_used = 0.0
        self.not_live: str | None = None
        """Why its iterator cannot take DataLoader knobs mid-epoch (loader_rebuild); None: it can."""

    def update(self, loader: Any, iterator: Any) -> None:
        """Read a DataLoader's settings and worker pids from it and its new iterator."""
        self.dataset = type(getattr(loader, "dataset", None)).__name__
        self.batch_size = getattr(loader, "batch_size", None)
        self.num_workers = int(getattr(loader, "num_workers", 0))
        self.pin_memory = bool(getattr(iterator, "_pin_memory", getattr(loader, "pin_memory", False)))
        self.prefetch_factor = getattr(loader, "prefetch_factor", None) if self.num_workers else None
        self.persistent_workers = bool(getattr(loader, "persistent_workers", False))
        self.drop_last = bool(getattr(loader, "drop_last", False))
        self.worker_pids = [w.pid for w in getattr(iterator, "_workers", ()) if getattr(w, "pid", None)]
        self.not_live = not_live_reason(loader, iterator)


class HookRuntime:
    """Per-process hook state. `torch` is the imported torch module (passed in to keep imports lazy)."""

    def __init__(self, torch: Any, clock: Callable[[], float] = time.perf_counter) -> None:
        self.torch = torch
        self.clock = clock
        self.perf0 = clock()
        self.unix0 = time.time()
        self.active = True
        self.records: deque[list[Any]] = deque(maxlen=MAX_RECORDS)
        self.seq = 0
        # The plan's state (gpumon.hook.schedule): what the last busy boundary planned, for the ones after it.
        self._quiet_until = 0
        """Boundaries before this seq are quiet (close_step; BoundaryPlan.next_busy); 0: the next one is busy..."""
        self._quiet_below_s = math.inf
        """...and only after steps shorter than this (with GPU timing, a slow step times the next one)."""
        self._budget_candidate = NO_CANDIDATE
        """The next busy boundary when only a budget candidate is due there; _other_due: the one after it with anything
        else due. Within budget_min_gap_s of the last budgeted step, such a boundary is quiet too (most of them, on
        fast steps)."""
        self._other_due = 0
        self._budgeted_at = -math.inf
        """When the last step budgeted on schedule opened (-inf: none yet)."""
        self._gpu_next_timed = 0
        """The step GPU timing's regular schedule times next (slow steps and budgeted ones are timed besides)."""
        # Requests from the server thread, applied at step boundaries; results going back.
        self.control: deque[tuple[str, Any, Any]] = deque(maxlen=64)
        self.outbox: deque[protocol.Message] = deque(maxlen=64)
        self.step_source: str | None = None
        self.errors = 0
        self.last_error: str | None = None
        self.on_first_activity: Callable[[], None] | None = None
        self.training_thread = 0
        """The thread that closes steps (its ident; 0: none yet), which the stack sampler reads."""
        self.sampler: Any = None
        """The StackSampler (gpumon.hook.stack_sampler) while the hook serves; None: not sampling."""
        # Accumulators of the open step.
        self._step_start = clock()
        self._data_wait = 0.0
        self._samples = 0
        self._samples_known = False
        self._fetched = False
        self._backward_since = False
        self._began = False
        # What the job has shown so far.
        self._backward_ever = False
        self._dataloader_ever = False
        self._manual = False
        self._optimizer_seen = False
        self.backward_matters = True
        """Whether on_backward has anything to do: not once an optimizer's steps mark the boundaries."""
        self.plain_fetch = False
        """Whether a DataLoader fetch needs only its wait, samples and loader totals counted (`dataloader_next`): no
        step closes at it, and no budget, NVTX range, GPU start mark or first activity waits on it. Set at busy
        boundaries, where all of those change."""
        self._plain_optimizer = 0
        """id() of the lead optimizer while its step needs only close_step (see optimizer_step_hook); 0: none."""
        self._tensor_type: Any = getattr(torch, "Tensor", _NotATensor)
        self._lead_optimizer: int | None = None
        self._lead_ref: Callable[[], Any] | None = None
        """A weak reference to the lead optimizer (None where it takes none): once it is gone, the next one leads."""
        self.optimizers: dict[int, tuple[str, str, int]] = {}
        """id() of each optimizer seen stepping -> (its class name, where its parameters live, the bytes of those on the
        CPU), once each."""
        self._lead_device: int | None = None
        self._other_optimizer_steps = 0
        # GPU timing.
        self.gpu: GpuStepTimer | None = None
        self._cuda_device: int | None = None
        self._resolved: list[list[Any]] = []
        # DataLoaders.
        self.loaders: dict[int, LoaderEntry] = {}
        self._iterators: dict[int, LoaderEntry] = {}
        self._last_iterator_id = 0
        self._last_entry: LoaderEntry | None = None
        self._feeding: dict[int, tuple[weakref.ref[Any], weakref.ref[Any]]] = {}
        """Each DataLoader's running iterator (by the loader's id), to give it DataLoader knobs mid-epoch."""
        self._take_over_due = False
        """DataLoader knobs were applied: the next fetch, once its batch is out, rebuilds the running iterators."""
        # Precision seen on the training thread.
        self.autocast: dict[str, Any] | None = None
        self.empty_cache = EmptyCacheCounter(clock)
        """torch.cuda.empty_cache() calls, counted by the wrapper install_patches puts on it."""
        self.knobs = KnobState(torch, self.empty_cache)
        self.diagnosis = SyncDiagnosis(torch, self.outbox)
        # Step time budget (sampled steps).
        is_compiling = self._is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or _never
        self.gc_timer = GcTimer(clock)
        """Garbage-collector totals; its callback goes on when the hook installs (lifecycle) and off at uninstall."""
        self.budget = BudgetMeter(
            torch,
            clock,
            is_compiling,
            self.error,
            gc_timer=self.gc_timer,
            empty_cache=self.empty_cache,
            device=lambda: self._cuda_device,
        )
        # NVTX ranges for nsys (GPUMON_NVTX=1 only).
        self.nvtx = NvtxRanges(torch) if nvtx_requested() else None
        # FLOPs of one sampled step now and then (FlopCounterMode).
        self.flops = FlopSampler(torch, self.error)
        # Profiler capture (on request only).
        self.profiler_capture = ProfilerCapture(torch, self.outbox, self.error)
        self._schedule = _schedule_from_env(torch, self.flops.every)

    # -- bookkeeping ---------------------------------------------------------------------------

    def error(self, exc: BaseException) -> None:
        """Count an exception raised inside the hook; it never reaches the job."""
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]

    def unix_time(self, perf: float) -> float:
        """A time of `clock` (perf_counter) as unix time."""
        return self.unix0 + (perf - self.perf0)

    def snapshot_records(self) -> list[list[Any]]:
        """A copy of the completed records, safe against the training thread appending meanwhile."""
        return copy_while_mutated(self.records)

    def _begin(self) -> None:
        """The first step starts at the job's first fetch or backward, not at install (model setup)."""
        self._began = True
        self.training_thread = get_ident()
        if self.seq == 0:
            self._step_start = self.clock()
        if self.nvtx is not None:
            self.nvtx.step()

    def _activity(self) -> None:
        callback = self.on_first_activity
        if callback is not None:
            self.on_first_activity = None
            callback()

    # -- signals from the patched functions (training thread) -----------------------------------

    def dataloader_next(self, original_next: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The wrapper of the DataLoader iterators' `original_next`: it times each fetch and counts its batch. While
        `plain_fetch`, that is all, in this one call (the hook's code runs cold, once a step: each call it makes costs
        1-3 us); otherwise `_fetch` runs the fetch (a step may close at it, the budget may time its collate_fn, NVTX
        marks it) and the GPU start mark and the first activity follow it."""
        runtime = self
        clock = self.clock  # not runtime.clock() in the wrapper: see close_step

        def __next__(iterator: Any) -> Any:
            if not runtime.active:
                return original_next(iterator)
            plain = runtime.plain_fetch
            if plain:
                started = clock()
                batch = original_next(iterator)
            else:
                started, batch = runtime._fetch(original_next, iterator)
                runtime._fetched = True  # first: step detection holds even if the counting below fails
                runtime._dataloader_ever = True
            try:
                now = clock()
                waited = now - started
                iterator_id = id(iterator)
                if iterator_id == runtime._last_iterator_id:
                    entry = runtime._last_entry
                else:
                    entry = runtime._iterators.get(iterator_id)
                    runtime._last_iterator_id = iterator_id
                    runtime._last_entry = entry
                if entry is not None:
                    entry.batches += 1
                    entry.wait_s += waited
                    entry.last_used = now
                runtime._data_wait += waited
                kind = type(batch)
                first: Any = batch[0] if (kind is list or kind is tuple) and batch else None
                if type(first) is runtime._tensor_type:  # the default collate's batch, without count_samples' call
                    shape = first.shape
                    runtime._samples += shape[0] if shape else 1
                    runtime._samples_known = True
                else:
                    count = count_samples(batch)
                    if count is not None:
                        runtime._samples += count
                        runtime._samples_known = True
                if not plain:
                    if runtime.gpu is not None:
                        runtime.gpu.mark_start()
                    if runtime.on_first_activity is not None:
                        runtime._activity()
            except Exception as exc:  # noqa: BLE001
                runtime.error(exc)
            return batch

        return __next__

    def _fetch(self, original_next: Callable[[Any], Any], iterator: Any) -> tuple[float, Any]:
        """A fetch that is not plain: (when it started, its batch). The original's exceptions pass through."""
        ranges = self.nvtx
        after_fetch = None
        try:
            started = self.on_fetch_begin()
            if self.budget.active:
                after_fetch = self.budget.wrap_collate(iterator)
            if ranges is not None:
                ranges.open(DATA_WAIT)
        except Exception as exc:  # noqa: BLE001
            self.error(exc)
            started = self.clock()
            return started, original_next(iterator)
        try:
            batch = original_next(iterator)
        finally:
            if ranges is not None:
                ranges.close(DATA_WAIT)
            if after_fetch is not None:
                try:
                    after_fetch()
                except Exception as exc:  # noqa: BLE001
                    self.error(exc)
        if self._take_over_due:
            self._loaders_take_over()
        return started, batch

    def on_fetch_begin(self) -> float:
        """Before a DataLoader fetch that is not plain: a step may end here; returns the clock."""
        if not self._began:
            self._begin()
        if self._fetched and not self._manual and not self._optimizer_seen:
            if self._backward_since:
                self.close_step(protocol.SOURCE_BACKWARD)
            elif not self._backward_ever:
                self.close_step(protocol.SOURCE_DATALOADER)
        return self.clock()

    def on_backward(self) -> None:
        """A backward() call: it ends the step where backward marks the steps."""
        if not self._began:
            self._begin()
        if self._backward_since and not self._dataloader_ever and not self._manual and not self._optimizer_seen:
            self.close_step(protocol.SOURCE_BACKWARD)
        self._backward_since = True
        self._backward_ever = True
        if self.on_first_activity is not None:
            self._activity()

    def optimizer_step_hook(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """torch's global optimizer step post-hook: on_optimizer_step, or only close_step for the lead optimizer once
        nothing else is left to do at its steps (one call less: this runs cold, once a step)."""
        is_compiling = self._is_compiling  # read, then called: see close_step
        if not self.active or is_compiling():
            return
        try:
            if self.budget.optimizer_id:  # a budgeted step's optimizer.step() is being timed
                self.budget.optimizer_done(optimizer)
            if id(optimizer) == self._plain_optimizer:
                self.close_step(protocol.SOURCE_OPTIMIZER)
            else:
                self.on_optimizer_step(optimizer)
        except Exception as exc:  # noqa: BLE001
            self.error(exc)

    def on_optimizer_step(self, optimizer: Any) -> None:
        """An optimizer's step() ended: the lead optimizer's ends the step."""
        self._plain_optimizer = 0
        key = id(optimizer)
        if key not in self.optimizers and len(self.optimizers) < MAX_OPTIMIZERS:
            self.optimizers[key] = (type(optimizer).__name__, params_device(optimizer), host_param_bytes(optimizer))
        if self._manual:
            return
        if self._lead_optimizer is None:
            self._take_lead(optimizer, key)
        elif key != self._lead_optimizer:
            self._other_optimizer_steps += 1
            if not self._lead_replaced_by_other():
                return
            self._take_lead(optimizer, key)
        self._other_optimizer_steps = 0
        if not self._optimizer_seen:
            self._optimizer_seen = True
            self.backward_matters = False
        self.close_step(protocol.SOURCE_OPTIMIZER)
        if self.on_first_activity is not None:
            self._activity()
        self._plain_optimizer = key

    def _lead_replaced_by_other(self) -> bool:
        """Whether another optimizer's step now takes the lead: the lead is gone, or silent (no step closed) for
        LEAD_SILENT_S while the other stepped twice, or the other stepped LEAD_SWITCH_AFTER times without it."""
        others = self._other_optimizer_steps
        if others >= LEAD_SWITCH_AFTER:
            return True
        lead = self._lead_ref
        if lead is not None and lead() is None:
            return True
        return others >= LEAD_SWITCH_SOON and self.clock() - self._step_start >= LEAD_SILENT_S

    def _take_lead(self, optimizer: Any, key: int) -> None:
        self._lead_optimizer = key
        self._lead_device = _cuda_index_of(optimizer)
        try:
            self._lead_ref = weakref.ref(optimizer)
        except TypeError:
            self._lead_ref = None

    def on_manual_step(self, samples: int | None) -> None:
        """gpumon.hook.step(): the script marks the step end itself (from then on, only it does)."""
        self._manual = True
        self._plain_optimizer = 0
        self.close_step(protocol.SOURCE_MANUAL, samples)
        if self.on_first_activity is not None:
            self._activity()

    def on_autocast_enter(self, autocast: Any) -> None:
        """An autocast context entered: its device type, dtype and when, for the precision state."""
        info = self.autocast
        if info is None:
            info = self.autocast = {"entered": 0}
        info["device_type"] = str(getattr(autocast, "device", ""))
        info["dtype"] = str(getattr(autocast, "fast_dtype", ""))
        info["enabled"] = bool(getattr(autocast, "_enabled", True))
        info["entered"] += 1
        info["last"] = self.clock()

    def on_loader_iter_begin(self, loader: Any) -> None:
        """A DataLoader's iter() begins: give it the DataLoader knobs in effect."""
        knobs = self.knobs.dataloader
        if knobs:
            apply_dataloader_knobs(loader, knobs)

    def on_loader_iter_end(self, loader: Any, iterator: Any) -> None:
        """A DataLoader's iter() made `iterator`: note its settings, follow its fetches."""
        loader_id = id(loader)
        entry = self.loaders.get(loader_id)
        if entry is None:
            if len(self.loaders) >= MAX_LOADERS:
                oldest = min(self.loaders.values(), key=lambda e: e.last_used)
                del self.loaders[oldest.id]
            entry = self.loaders[loader_id] = LoaderEntry(loader_id)
        entry.update(loader, iterator)
        entry.last_used = self.clock()
        self._track_iterator(iterator, entry)
        if len(self._feeding) >= MAX_LOADERS and loader_id not in self._feeding:
            del self._feeding[next(iter(self._feeding))]
        try:
            self._feeding[loader_id] = (weakref.ref(loader), weakref.ref(iterator))
        except TypeError:  # not weakly referable (no torch iterator): it takes DataLoader knobs at its next iter()
            self._feeding.pop(loader_id, None)

    def _track_iterator(self, iterator: Any, entry: LoaderEntry) -> None:
        if len(self._iterators) >= MAX_ITERATORS:
            del self._iterators[next(iter(self._iterators))]
        self._iterators[id(iterator)] = entry
        self._last_iterator_id = 0

    def _loaders_take_over(self) -> None:
        """Give each DataLoader's running iterator the DataLoader knobs now, mid-epoch (loader_rebuild.take_over): at
        a batch boundary, never inside a fetch. A loader that cannot (not_live) takes them at its next iter()."""
        self._take_over_due = False
        self._replan()  # the next boundary sets plain_fetch again
        knobs = self.knobs.dataloader
        for loader_id, (loader_ref, iterator_ref) in list(self._feeding.items()):
            loader, iterator, entry = loader_ref(), iterator_ref(), self.loaders.get(loader_id)
            if loader is None or iterator is None or entry is None:
                del self._feeding[loader_id]  # its epoch is over: the next iter() applies the knobs
                continue
            if entry.not_live is not None:
                continue
            try:
                new = take_over(self.torch, loader, iterator, knobs)
            except Exception as exc:  # noqa: BLE001 - the loader goes on as it was
                self.error(exc)
                self.knobs.error(f"DataLoader {type(loader.dataset).__name__}: {type(exc).__name__}: {exc}")
                continue
            if new is not None:
                self._feeding[loader_id] = (loader_ref, weakref.ref(new))
                self._track_iterator(new, entry)
                entry.update(loader, new)

    def not_live(self, knobs: dict[str, Any]) -> dict[str, str]:
        """For the DataLoader knobs among `knobs`: why a loader of the job cannot take them mid-epoch (server
        thread: the entries are read, never changed)."""
        reasons = [e.not_live for e in copy_while_mutated(self.loaders.values()) if e.not_live is not None]
        if not reasons:
            return {}
        return {name: reasons[0] for name in knobs if name in LOADER_SETTINGS}

    # -- step boundaries -----------------------------------------------------------------------

    def close_step(self, source: str, samples: int | None = None) -> None:
        """End the open step: append its record (or queue it for GPU time) and start the next one.

        Most boundaries are quiet (nothing sampled, timed, due or requested around them) and only append the record.
        The hook's code runs once a step, with the job's work in between evicting it from the CPU caches, so each call
        and object it touches costs far more than in a tight loop (1-3 us each on the VM): the quiet path is short.
        The clock is read into a local first: CPython 3.11 never specializes `self.clock()` (a call of an instance
        attribute) and looks it up in the type every time, where `clock = self.clock` is a specialized read."""
        clock = self.clock
        now = clock()
        seq = self.seq = self.seq + 1
        if samples is None and self._samples_known:
            samples = self._samples
        wall = now - self._step_start
        data_wait = self._data_wait
        self.step_source = source
        self._began = True
        self._step_start = now
        self._data_wait = 0.0
        self._samples = 0
        self._samples_known = False
        self._fetched = False
        self._backward_since = False
        if seq < self._quiet_until and wall < self._quiet_below_s and not self.control:
            self.records.append([seq, now, wall, data_wait, samples, None, None, source, None, None])
        else:
            self._close_busy_step(seq, now, wall, data_wait, samples, source)

    def _close_busy_step(
        self, seq: int, now: float, wall: float, data_wait: float, samples: int | None, source: str
    ) -> None:
        """close_step's boundary with work to do: it executes the schedule's plan for it (sampled or timed steps,
        counts and probes due) and requests, then keeps the plan's next busy boundary for close_step."""
        self.training_thread = get_ident()
        since = now - self._budgeted_at  # since the last step budgeted on schedule
        if (
            seq == self._budget_candidate
            and since < self._schedule.budget_min_gap_s
            and wall < self._quiet_below_s
            and not self.control
        ):
            # Only a budget candidate was due here, and the last budgeted step is too recent for it: as quiet as the
            # boundaries around it (everything else the plan had is due later).
            self.records.append([seq, now, wall, data_wait, samples, None, None, source, None, None])
            self._quiet_until, self._budget_candidate = self._schedule.skip_candidate(seq, self._other_due)
            return
        syncs = self.diagnosis.syncs_since_last()  # None unless a diagnosis window is counting
        gpu = self.gpu
        known = self._cuda_device is not None
        # Positional (keywords cost a cold boundary more): then diagnosing, timing, next_timed, cuda_known.
        plan = self._schedule.at(seq, wall, since, syncs is not None, gpu is not None, self._gpu_next_timed, known)
        budget = self.budget.record(wall, data_wait) if self.budget.active else None
        record = [seq, now, wall, data_wait, samples, None, syncs, source, budget, None]
        if self.nvtx is not None:
            self.nvtx.step()
        sampled = plan.budget
        if sampled:
            if plan.budget_on_schedule:
                self._budgeted_at = now
            self.budget.begin(True)
        elif self.budget.active:
            self.budget.begin(False)
        if plan.count_flops or self.flops.counting:
            self.flops.boundary(seq, samples)

        if gpu is None:
            self.records.append(record)
            if plan.cuda_probe:
                device = self._probe_cuda()
                if device is not None:
                    plan = self._plan_with_cuda(device, seq, wall, since, syncs is not None)
        else:
            gpu.end_step(record)
            self._gpu_next_timed = plan.next_timed
            gpu.begin_step(plan.gpu_time, start_at_boundary=not self._dataloader_ever)
            resolved = self._resolved
            gpu.resolve(resolved, R_GPU, R_COMM)
            if resolved:
                self.records.extend(resolved)
                resolved.clear()
        if syncs is not None:
            self.diagnosis.step(syncs)
        if self.profiler_capture.active:
            self.profiler_capture.step()
        if self.control or self.knobs.reapply:
            self._drain_control()
        gpu = self.gpu  # a CUDA probe may have started GPU timing above
        self._quiet_below_s = plan.quiet_below_s
        if (
            (gpu is not None and not gpu.idle)
            or self.nvtx is not None
            or self.budget.active
            or self.flops.counting
            or self.profiler_capture.active
            or self.knobs.reapply
            or self.diagnosis.counting
        ):  # something sampled, timed, waited for, counted or captured: the next boundary is busy too
            self._quiet_until = seq + 1
            self._budget_candidate = NO_CANDIDATE
        else:
            self._quiet_until = plan.next_busy
            self._budget_candidate = plan.budget_candidate
            self._other_due = plan.other_due
        self.plain_fetch = (
            (self._optimizer_seen or self._manual)
            and self._dataloader_ever
            and not self.budget.active
            and self.nvtx is None
            and (gpu is None or not gpu.timed)
            and self.on_first_activity is None
            and not self._take_over_due
        )

    def _plan_with_cuda(
        self, device: int, seq: int, wall: float, since_budgeted: float, diagnosing: bool
    ) -> BoundaryPlan:
        """The job's CUDA `device` was just found at boundary `seq`: its plan again with the device known (the same
        budget: the plan is pure) and, unless GPU timing is off, GPU timing starting with the step opening here."""
        schedule = self._schedule
        timing = schedule.gpu_every > 0
        first = schedule.first_timed(seq + 1)
        plan = schedule.at(
            seq, wall, since_budgeted, diagnosing=diagnosing, timing=timing, next_timed=first, cuda_known=True
        )
        if timing:
            self.gpu = GpuStepTimer(self.torch, device)
            self._gpu_next_timed = plan.next_timed
            self.gpu.begin_step(plan.gpu_time, start_at_boundary=not self._dataloader_ever)
        return plan

    def _probe_cuda(self) -> int | None:
        """Once the job has initialized CUDA: note its device (the lead optimizer's, else the current one) and
        return it; None while it has not."""
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            return None
        device = self._lead_device
        if device is None:
            device = cuda.current_device()
        self._cuda_device = device
        return device

    @property
    def schedule(self) -> Schedule:
        """The step schedule's settings (gpumon.hook.schedule); setting it plans the next boundary anew."""
        return self._schedule

    @schedule.setter
    def schedule(self, schedule: Schedule) -> None:
        """A new plan of the hook's work per step; the next boundary with work is planned again."""
        self._schedule = schedule
        self._replan()

    @property
    def budget_every(self) -> int:
        """Budget one step in this many (0: none); setting it keeps the gap (budget_min_gap_s)."""
        return self._schedule.budget_every

    @budget_every.setter
    def budget_every(self, every: int) -> None:
        """Budget one step in `every` (0: never)."""
        self.schedule = dataclasses.replace(self._schedule, budget_every=every)

    @property
    def budget_min_gap_s(self) -> float:
        """Budgeted steps on schedule at least this far apart (0: exactly one in budget_every)."""
        return self._schedule.budget_min_gap_s

    @budget_min_gap_s.setter
    def budget_min_gap_s(self, gap_s: float) -> None:
        """At least this many seconds between budgeted steps."""
        self.schedule = dataclasses.replace(self._schedule, budget_min_gap_s=gap_s)

    @property
    def gpu_every(self) -> int:
        """GPU-time one step in this many (0: only after slow and budgeted steps, once timing has started)."""
        return self._schedule.gpu_every

    @gpu_every.setter
    def gpu_every(self, every: int) -> None:
        """Time exactly one step in `every` from now on, as GPUMON_HOOK_GPU_TIMING=N does (no gap)."""
        self.schedule = dataclasses.replace(self._schedule, gpu_every=every, gpu_min_gap_s=0.0)
        self._gpu_next_timed = self._schedule.first_timed(self.seq + 1)

    @property
    def gpu_min_gap_s(self) -> float:
        """GPU-timed steps on schedule at least this far apart, by the last step's time (0: exactly one in N)."""
        return self._schedule.gpu_min_gap_s

    def _replan(self) -> None:
        """Make the next boundary a busy one, which plans the ones after it again."""
        self._quiet_until = 0
        self._budget_candidate = NO_CANDIDATE

    @property
    def cuda_device(self) -> int | None:
        """The job's CUDA device: the one found at a probe, else the lead optimizer's; None: unknown."""
        return self._cuda_device if self._cuda_device is not None else self._lead_device

    def flush(self) -> None:
        """At exit: hand pending records over, GPU time only where already measured; end a diagnosis."""
        if self.sampler is not None:
            self.sampler.stop()  # before CUDA is torn down: no stream query after this
        if self.gpu is not None:
            resolved: list[list[Any]] = []
            self.gpu.flush(resolved, R_GPU, R_COMM)
            self.records.extend(resolved)
        if self.diagnosis.counting:
            self.diagnosis.finish()
        self.budget.stop()
        self.gc_timer.stop()
        if self.nvtx is not None:
            self.nvtx.close_all()
        self.flops.stop()
        self.profiler_capture.stop()
        self.profiler_capture.wait_written(PROFILE_EXIT_WAIT_S)

    # -- control requests (applied on the training thread) -------------------------------------

    def _drain_control(self) -> None:
        self.knobs.reapply_pending()
        while self.control:
            kind, payload, request_id = self.control.popleft()
            if kind == "knobs":
                self.knobs.apply(payload)
                if any(name in LOADER_SETTINGS for name in payload):
                    self._take_over_due = True
            elif kind == "diagnose":
                self.diagnosis.start(payload, request_id)
            elif kind == "profile":
                steps, path = payload
                self.profiler_capture.start(steps, path, request_id)

    def set_env_knobs(self, raw: str) -> None:
        """GPUMON_KNOBS (trial runs): see KnobState.apply_env; the next boundary is a busy one, to apply them again."""
        if self.knobs.apply_env(raw):
            self._replan()

    @property
    def diagnosing(self) -> bool:
        """Whether a diagnosis window counts or waits to start (server thread)."""
        if self.diagnosis.counting:
            return True
        return any(item[0] == "diagnose" for item in copy_while_mutated(self.control))


def _schedule_from_env(torch: Any, flops_every: int) -> Schedule:
    """The schedule GPUMON_HOOK_BUDGET_EVERY and GPUMON_HOOK_GPU_TIMING ask for (an explicit N: exactly one in N, no
    gap), no CUDA probes with a torch built without CUDA (or HIP), where CUDA can never be initialized."""
    gpu_every = env_count_given(protocol.GPU_TIMING_ENV, GPU_TIMING_EVERY)
    budget_every = env_count_given(protocol.BUDGET_EVERY_ENV, BUDGET_EVERY)
    version = getattr(torch, "version", None)
    return Schedule(
        budget_every=BUDGET_EVERY if budget_every is None else budget_every,
        budget_min_gap_s=BUDGET_MIN_GAP_S if budget_every is None else 0.0,
        gpu_every=GPU_TIMING_EVERY if gpu_every is None else gpu_every,
        gpu_min_gap_s=GPU_TIMING_MIN_GAP_S if gpu_every is None else 0.0,
        flops_every=flops_every,
        cuda_probes=version is None or bool(getattr(version, "cuda", None) or getattr(version, "hip", None)),
    )


def _never() -> bool:
    return False


class _NotATensor:
    """Stands for torch.Tensor where torch has none (no batch is of this type)."""


def copy_while_mutated(items: Any) -> list[Any]:
    """list(items) for a deque or dict view another thread may change meanwhile (retried; [] if never
    stable: the copy runs under the GIL, but a garbage collection inside it can let the other thread in)."""
    for _ in range(5):
        try:
            return list(items)
        except RuntimeError:  # mutated during iteration
            continue
    return []


def _cuda_index_of(optimizer: Any) -> int | None:
    """The CUDA device of the optimizer's first parameter, None when it is not on CUDA."""
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            device = getattr(param, "device", None)
            if getattr(device, "type", None) == "cuda":
                index = getattr(device, "index", None)
                return int(index) if index is not None else 0
            return None
    return None


def host_param_bytes(optimizer: Any) -> int:
    """The bytes of an optimizer's parameters that live on the CPU (the first MAX_PARAMS_WALKED parameters): what an
    optimizer offloaded to the host copies down as gradients and up as weights every step."""
    total = walked = 0
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            walked += 1
            if walked > MAX_PARAMS_WALKED:
                return total
            if getattr(getattr(param, "device", None), "type", None) == "cpu":
                total += int(param.numel()) * int(param.element_size())
    return total


def params_device(optimizer: Any) -> str:
    """Where an optimizer's parameters live: their device type ("cuda", "cpu", ...), "mixed" when they are on
    several, "none" without parameters."""
    kinds: set[str] = set()
    walked = 0
    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            kinds.add(str(getattr(getattr(param, "device", None), "type", "unknown")))
            walked += 1
            if len(kinds) > 1 or walked >= MAX_PARAMS_WALKED:
                break
        if len(kinds) > 1 or walked >= MAX_PARAMS_WALKED:
            break
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "mixed"
