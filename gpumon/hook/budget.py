"""The step time budget: where a sampled step's host time goes (collate, copies both ways, waits on the GPU, the
optimizer), with the job's cumulative garbage-collector and caching-allocator figures read at its end.

Only sampled steps are measured: the runtime calls `begin(True)` at the boundary that opens one and `begin(False)`
at the next. Timing wrappers go on a few torch.Tensor methods and torch.cuda.synchronize at the first sampled step
and stay until `stop()` (uninstall, exit, a forked child): outside sampled steps they only pass the call on. Taking
them off and on at each sampled step would edit the torch.Tensor class four times a second, and from Python 3.13 a
class edited about 500 times is never given an attribute cache again (MAX_VERSIONS_PER_CLASS): every attribute
of every tensor would be looked up the slow way for the rest of the job (benchmarks/type_version_tags.py). The
wrappers time the CPU-side call on the training thread only, call the original with the same arguments, and never
add a CUDA call that synchronizes (a stream's `query()` is the only extra call, and it never waits). A global
optimizer step pre-hook, registered with the wrappers and kept as long, marks when a sampled step's optimizer.step()
starts; the runtime's post-hook (`optimizer_done`) marks its end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gpumon.hook.allocator import EmptyCacheCounter, device_alloc_counts
from gpumon.hook.gc_timer import GcTimer
from gpumon.protocol import activity
from gpumon.protocol.messages import StepBudget

BUDGET_EVERY = 16
"""One step in this many is budgeted (and every step of a diagnosis window)."""
BUDGET_MIN_GAP_S = 0.25
"""With the default BUDGET_EVERY, budgeted steps are at least this far apart: a budgeted step costs about 0.25 ms
more (CPU, 40 small Linear layers), 1.1% of a 1.4 ms launch-bound step when one in 16 is budgeted; at most four a
second bounds it by 0.1% of the job's time whatever its step (a diagnosis window still budgets every step). An
explicit GPUMON_HOOK_BUDGET_EVERY has no gap."""

BUDGET_SLOW_STEP_S = 0.05
"""After a step at least this long, the next one is budgeted too (still `BUDGET_MIN_GAP_S` apart): one step in 16 of a
job stepping a few times a second is one every few seconds, and a diagnosis window of a job whose step takes longer
than the window itself would see none. The gap bounds the cost as before (at most four a second), and on a step of
50 ms a budgeted step's 0.25 ms is 0.5% of that one step."""

MAX_REWRAPS = 4
"""Times a method that another library replaced after ours went on is wrapped again, at later sampled steps."""

_MISSING = object()
_TENSOR_METHODS = ("to", "cuda", "copy_", "item", "tolist", "cpu", "__bool__", "__float__", "__int__")
_SYNC_METHODS = frozenset({"item", "tolist", "__bool__", "__float__", "__int__"})
"""Calls that wait for the GPU when their tensor is on it: `if loss < best:` and float(loss) among them."""


class BudgetMeter:
    """Accumulates one sampled step's collate, copy and sync times; `take()` hands them over and resets."""

    def __init__(
        self,
        torch: Any,
        clock: Callable[[], float],
        is_compiling: Callable[[], bool],
        on_error: Callable[[BaseException], None],
        *,
        gc_timer: GcTimer | None = None,
        empty_cache: EmptyCacheCounter | None = None,
        device: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._torch = torch
        self._clock = clock
        self._is_compiling = is_compiling
        self._on_error = on_error
        self.gc_timer = gc_timer if gc_timer is not None else GcTimer(clock)
        """The job's garbage-collector totals, read at the end of each budgeted step (the runtime starts it)."""
        self.empty_cache = empty_cache if empty_cache is not None else EmptyCacheCounter(clock)
        """The job's torch.cuda.empty_cache() calls (the patches wrap it)."""
        self._device = device
        self._optimizer_hook: Any = None
        """The handle of the optimizer step pre-hook, while the wrappers are on."""
        self.active = False
        self.inside: str | None = None
        """While a timed call runs on the training thread: the activity the stack sampler counts it as (a copy or a
        sync in a line whose text does not say so, e.g. `dst.copy_(src)` across devices); None otherwise."""
        self._thread = 0
        self._depth = 0
        self._installed: dict[str, tuple[Any, str, Any, Any]] = {}
        """Per method name: (owner, name, what was in its place, our wrapper)."""
        self._wrappers: dict[str, tuple[Any, Any]] = {}
        self._rewraps: dict[str, int] = {}
        self.class_edits = 0
        """How many times the wrappers have edited a class (torch.Tensor): twice a method in a whole job, normally."""
        self.reset()

    def reset(self) -> None:
        """Zero the open step's sums (each step's budget starts empty)."""
        self.collate_s = 0.0
        self.h2d_s = 0.0
        self.h2d_bytes = 0
        self.h2d_pageable_bytes = 0
        self.h2d_copies = 0
        self.h2d_wait_s = 0.0
        self.h2d_wait_bytes = 0
        self.d2h_s = 0.0
        self.d2h_idle_s = 0.0
        self.d2h_bytes = 0
        self.d2h_copies = 0
        self.sync_s = 0.0
        self.syncs = 0
        self.optimizer_s = 0.0
        self.optimizer_id = 0
        """id() of the optimizer whose step() is being timed; 0: none."""
        self._optimizer_started = 0.0
        self._empty_cache_calls_before = self.empty_cache.calls
        self._empty_cache_s_before = self.empty_cache.seconds

    # -- on and off at step boundaries ---------------------------------------------------------

    def begin(self, sampled: bool) -> None:
        """A step opens: measure it or not (the wrappers, once on, stay and only pass calls on while not)."""
        self.reset()
        self._depth = 0
        if sampled and not self.active:
            self._thread = threading.get_ident()
            self._install()
            self.active = True
        elif not sampled:
            self.active = False

    def stop(self) -> None:
        """Measure nothing more and take the wrappers off (the job's classes as they were, where still ours)."""
        self.active = False
        self._remove()

    def _install(self) -> None:
        """Put each wrapper on where it is not already: at the first sampled step, and again only where another
        library replaced one of them since (at most MAX_REWRAPS times a method: each one is a class edit)."""
        tensor = getattr(self._torch, "Tensor", None)
        for name in _TENSOR_METHODS if tensor is not None else ():
            self._ensure(tensor, name, self._wrap)
        self._ensure(self._torch.cuda, "synchronize", self._wrap_synchronize)
        if self._optimizer_hook is None:
            try:
                from torch.optim.optimizer import register_optimizer_step_pre_hook

                self._optimizer_hook = register_optimizer_step_pre_hook(self._optimizer_step_begins)
            except Exception as exc:  # noqa: BLE001 - a torch without global optimizer hooks: no optimizer_ms
                self._on_error(exc)

    def _ensure(self, owner: Any, name: str, wrap: Callable[..., Any]) -> None:
        current = getattr(owner, name, None)
        installed = self._installed.get(name)
        if current is None or (installed is not None and installed[3] is current):
            return
        if installed is not None:  # ours was replaced by another library's
            if self._rewraps.get(name, 0) >= MAX_REWRAPS:
                return
            self._rewraps[name] = self._rewraps.get(name, 0) + 1
        previous = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else current
        wrapper = self._wrapper(name, current, wrap)
        setattr(owner, name, wrapper)
        self.class_edits += isinstance(owner, type)
        self._installed[name] = (owner, name, previous, wrapper)

    def _wrapper(self, name: str, original: Any, wrap: Callable[..., Any]) -> Any:
        """The wrapper of `original`, made once and reused while `original` stays what is there."""
        made = self._wrappers.get(name)
        if made is not None and made[0] is original:
            return made[1]
        wrapper = wrap(original) if name == "synchronize" else wrap(name, original)
        self._wrappers[name] = (original, wrapper)
        return wrapper

    def _remove(self) -> None:
        hook, self._optimizer_hook = self._optimizer_hook, None
        if hook is not None:
            try:
                hook.remove()
            except Exception as exc:  # noqa: BLE001 - best effort; counted, never raised into the job
                self._on_error(exc)
        for owner, name, previous, wrapper in self._installed.values():
            try:
                current = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
                if current is not wrapper:
                    continue  # someone replaced it meanwhile: theirs stays
                if previous is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, previous)
                self.class_edits += isinstance(owner, type)
            except Exception as exc:  # noqa: BLE001 - best effort; counted, never raised into the job
                self._on_error(exc)
        self._installed.clear()

    # -- the data wait's collate part ----------------------------------------------------------

    def wrap_collate(self, iterator: Any) -> Callable[[], None] | None:
        """Time a single-process iterator's collate_fn for this fetch; returns what undoes it (None: nothing to do).
        Copies and syncs inside the fetch are part of the data wait, not timed twice."""
        self._depth += 1
        fetcher: Any = getattr(iterator, "_dataset_fetcher", None)
        original = getattr(fetcher, "collate_fn", None)
        if original is None or "collate_fn" not in getattr(fetcher, "__dict__", {}):
            return self._leave
        clock = self._clock

        def timed_collate(batch: Any) -> Any:
            started = clock()
            try:
                return original(batch)
            finally:
                self.collate_s += clock() - started

        fetcher.collate_fn = timed_collate

        def restore() -> None:
            self._leave()
            if fetcher.__dict__.get("collate_fn") is timed_collate:
                fetcher.collate_fn = original

        return restore

    def _leave(self) -> None:
        self._depth = max(0, self._depth - 1)

    # -- copies and syncs ------------------------------------------------------------------------

    def _mine(self) -> bool:
        return self.active and self._depth == 0 and threading.get_ident() == self._thread and not self._is_compiling()

    def _stream_busy(self) -> bool:
        """Whether the current stream still has queued work (query() never waits); False when unknown."""
        cuda = self._torch.cuda
        if not cuda.is_initialized() or cuda.is_current_stream_capturing():
            return False
        return not cuda.current_stream().query()

    def _drain(self) -> bool:
        """Before a blocking device->host copy, which waits for the current stream anyway: wait for it here, so the
        copy's own time, with the stream empty and the SMs idle, can be told apart (d2h_idle_ms)."""
        try:
            cuda = self._torch.cuda
            if not cuda.is_initialized() or cuda.is_current_stream_capturing():
                return False
            cuda.current_stream().synchronize()
            return True
        except Exception as exc:  # noqa: BLE001 - the job's call still happens
            self._on_error(exc)
            return False

    def _wrap(self, name: str, original: Any) -> Any:
        meter = self

        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not meter.active or not meter._mine():
                return original(tensor, *args, **kwargs)
            try:
                kind, blocking = _classify(name, tensor, args, kwargs)
                busy = kind == "h2d" and blocking and meter._stream_busy()
            except Exception as exc:  # noqa: BLE001 - the job's call still happens
                meter._on_error(exc)
                return original(tensor, *args, **kwargs)
            if kind is None:
                return original(tensor, *args, **kwargs)
            meter._depth += 1
            meter.inside = _sampled_as(kind, blocking)
            started = meter._clock()
            drained = kind == "d2h" and blocking and meter._drain()
            copying = meter._clock()
            try:
                return original(tensor, *args, **kwargs)
            finally:
                meter.inside = None
                meter._depth -= 1
                ended = meter._clock()
                if drained:
                    meter.d2h_idle_s += ended - copying
                source = _copy_source(name, tensor, args, kwargs) if kind != "sync" else None
                meter._count(kind, blocking, busy, source, ended - started)

        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__qualname__ = getattr(original, "__qualname__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        return wrapper

    def _wrap_synchronize(self, original: Any) -> Any:
        meter = self

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            if not meter.active or not meter._mine():
                return original(*args, **kwargs)
            meter._depth += 1
            started = meter._clock()
            try:
                return original(*args, **kwargs)
            finally:
                meter._depth -= 1
                meter._count("sync", True, False, None, meter._clock() - started)

        synchronize.__name__ = "synchronize"
        synchronize.__doc__ = getattr(original, "__doc__", None)
        return synchronize

    def _count(self, kind: str, blocking: bool, busy: bool, source: Any, seconds: float) -> None:
        """One timed call: a host->device copy (one that first waited for queued GPU work is a sync too: its time in
        syncs' and in h2d_wait, its bytes among the copies'), a device->host copy (which waits for the GPU when
        blocking: counted in `syncs`, its time in d2h only), or a sync."""
        try:
            if kind == "h2d":
                nbytes = int(source.numel()) * int(source.element_size())
                self.h2d_bytes += nbytes
                self.h2d_copies += 1
                if not source.is_pinned():
                    self.h2d_pageable_bytes += nbytes
                if busy:
                    self.h2d_wait_s += seconds
                    self.h2d_wait_bytes += nbytes
                    self.sync_s += seconds
                    self.syncs += 1
                else:
                    self.h2d_s += seconds
            elif kind == "d2h":
                self.d2h_s += seconds
                self.d2h_bytes += int(source.numel()) * int(source.element_size())
                self.d2h_copies += 1
                self.syncs += blocking
            else:
                self.sync_s += seconds
                self.syncs += 1
        except Exception as exc:  # noqa: BLE001 - bookkeeping only
            self._on_error(exc)

    # -- the optimizer's step ---------------------------------------------------------------------

    def _optimizer_step_begins(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The global optimizer step pre-hook: on a budgeted step, when the outermost optimizer.step() begins.
        `is_compiling` first: a compiled caller's graph must not read (and guard on) `active`."""
        if self._is_compiling() or not self.active:
            return
        try:
            if self.optimizer_id == 0 and self._depth == 0 and threading.get_ident() == self._thread:
                self.optimizer_id = id(optimizer)
                self._optimizer_started = self._clock()
        except Exception as exc:  # noqa: BLE001 - bookkeeping only
            self._on_error(exc)

    def optimizer_done(self, optimizer: Any) -> None:
        """Called by the runtime's optimizer step post-hook while `optimizer_id` is set: that step's time."""
        if id(optimizer) == self.optimizer_id:
            self.optimizer_s += self._clock() - self._optimizer_started
            self.optimizer_id = 0

    # -- the record ---------------------------------------------------------------------------------

    def record(self, wall_s: float, data_s: float) -> StepBudget:
        """The budget of the step that just ended (times in ms; gpu_ms is added when the record is sent), with the
        job's cumulative garbage-collector and allocator figures as they stand now."""
        collate = min(self.collate_s, data_s)
        rest = max(0.0, wall_s - data_s - self.h2d_s - self.d2h_s - self.sync_s)
        gc_timer = self.gc_timer
        empty_cache = self.empty_cache
        budget = StepBudget(
            data_worker_ms=round((data_s - collate) * 1e3, 4),
            data_collate_ms=round(collate * 1e3, 4),
            h2d_ms=round(self.h2d_s * 1e3, 4),
            h2d_bytes=self.h2d_bytes,
            h2d_pageable_bytes=self.h2d_pageable_bytes,
            h2d_copies=self.h2d_copies,
            h2d_wait_ms=round(self.h2d_wait_s * 1e3, 4),
            h2d_wait_bytes=self.h2d_wait_bytes,
            d2h_ms=round(self.d2h_s * 1e3, 4),
            d2h_idle_ms=round(self.d2h_idle_s * 1e3, 4),
            d2h_bytes=self.d2h_bytes,
            d2h_copies=self.d2h_copies,
            sync_wait_ms=round(self.sync_s * 1e3, 4),
            syncs=self.syncs,
            rest_ms=round(rest * 1e3, 4),
            optimizer_ms=round(self.optimizer_s * 1e3, 4),
            empty_cache_ms=round((empty_cache.seconds - self._empty_cache_s_before) * 1e3, 4),
            empty_cache_calls=empty_cache.calls - self._empty_cache_calls_before,
            empty_cache_ms_total=round(empty_cache.seconds * 1e3, 4),
            empty_cache_idle_ms_total=round(empty_cache.idle_seconds * 1e3, 4),
            empty_cache_calls_total=empty_cache.calls,
            gc_ms_total=round(gc_timer.seconds * 1e3, 4),
            gc_idle_ms_total=round(gc_timer.idle_seconds * 1e3, 4),
            gc_passes_total=gc_timer.passes,
            gc_gen2_total=gc_timer.gen2_passes,
            gc_collected_total=gc_timer.collected,
        )
        try:
            counts = device_alloc_counts(self._torch, self._device())
        except Exception as exc:  # noqa: BLE001 - the budget goes without them
            self._on_error(exc)
            counts = None
        if counts is not None:
            budget["device_allocs_total"], budget["device_frees_total"] = counts
        return budget


def _is_cuda_target(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("cuda")
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True  # a device index is a CUDA device
    device_type = getattr(value, "type", None)
    if isinstance(device_type, str) and not hasattr(value, "is_cuda"):
        return device_type == "cuda"
    return bool(getattr(value, "is_cuda", False))


def _is_cpu_target(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("cpu")
    if hasattr(value, "is_cuda"):  # a tensor: `to(other)` takes its device
        return not value.is_cuda and getattr(getattr(value, "device", None), "type", None) == "cpu"
    return getattr(value, "type", None) == "cpu"


def _sampled_as(kind: str, blocking: bool) -> str | None:
    """The activity a timed call's samples count as: a host->device copy is one; a blocking device->host copy waits
    for the GPU as a sync does (its measured time then replaces those samples in the step model); a non-blocking one
    is not waited on, and keeps the line's own activity."""
    if kind == "h2d":
        return activity.H2D
    return activity.SYNC if blocking else None


def _copy_source(name: str, tensor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The tensor a copy reads: copy_'s `src`, else the tensor the method was called on."""
    if name == "copy_":
        return args[0] if args else kwargs.get("src")
    return tensor


def _classify(name: str, tensor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str | None, bool]:
    """('h2d' | 'd2h' | 'sync' | None, blocking) for one call of a wrapped Tensor method. A device->host copy is
    'd2h' whether it blocks or not (blocking, it waits for the GPU too)."""
    on_cuda = bool(tensor.is_cuda)
    if name in _SYNC_METHODS:
        return ("sync" if on_cuda else None), True
    if name == "cpu":
        return ("d2h" if on_cuda else None), True
    if name == "cuda":
        blocking = not kwargs.get("non_blocking", len(args) > 1 and args[1] is True)
        return (None if on_cuda else "h2d"), blocking
    if name == "copy_":
        source = args[0] if args else kwargs.get("src")
        blocking = not kwargs.get("non_blocking", len(args) > 1 and args[1] is True)
        source_cuda = bool(getattr(source, "is_cuda", False))
        if on_cuda and source is not None and not source_cuda:
            return "h2d", blocking
        if not on_cuda and source_cuda:
            return "d2h", blocking
        return None, blocking
    # Tensor.to(device=None, dtype=None, non_blocking=False, copy=False) or to(other_tensor, ...).
    blocking = not kwargs.get("non_blocking", any(arg is True for arg in args))
    targets = [*args[:1], kwargs.get("device"), kwargs.get("other")]
    to_cuda = any(_is_cuda_target(target) for target in targets if target is not None)
    to_cpu = any(_is_cpu_target(target) for target in targets if target is not None)
    if not on_cuda and to_cuda:
        return "h2d", blocking
    if on_cuda and to_cpu:
        return "d2h", blocking
    return None, blocking
