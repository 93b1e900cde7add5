"""Times the job's torch.distributed collectives on GPU-timed steps, so communication no compute hid is measured live.

A collective called in sync mode (`dist.all_reduce(t)`, no `async_op=True`) makes the training stream wait for NCCL's
stream: work queued after it starts only once the communication is done. The wrapper records an event on the
training stream before the call and one after it (GpuStepTimer.comm_begin / comm_end); the time between them, read
once both completed (never waited for), is the time the stream waited: exposed communication. Only on the steps the
GPU timer times, only on the training thread, and not for async calls (their wait is at `work.wait()`, in C++).
DDP's own all-reduces run inside backward, in C++: they are not seen here (a profiler capture sees them).
"""

from __future__ import annotations

import functools
import inspect
from threading import get_ident
from typing import Any

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
)


def _async_position(function: Any) -> int | None:
    """The position of `async_op` among `function`'s parameters (None: it has none, or no signature)."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("async_op") if "async_op" in names else None


def timed_collective(name: str, original: Any, runtime: Any) -> Any:
    """The wrapper of one collective: the original, called as it was, between two events on timed steps."""
    position = _async_position(original)

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        gpu = runtime.gpu
        if gpu is None or not gpu.timed or not runtime.active or get_ident() != runtime.training_thread:
            return original(*args, **kwargs)
        if kwargs.get("async_op") or (position is not None and len(args) > position and args[position]):
            return original(*args, **kwargs)
        try:
            before = gpu.comm_begin()
        except Exception as exc:  # noqa: BLE001 - the job's call still happens
            runtime.error(exc)
            return original(*args, **kwargs)
        try:
            return original(*args, **kwargs)
        finally:
            try:
                gpu.comm_end(before)
            except Exception as exc:  # noqa: BLE001
                runtime.error(exc)

    return collective


def wrap_collectives(torch: Any, runtime: Any, set_attribute: Any) -> None:
    """Put the wrappers on torch.distributed's collectives (`set_attribute(owner, name, wrapper)` keeps the original
    for the way out); nothing where torch has no distributed package."""
    distributed = getattr(torch, "distributed", None)
    if distributed is None or not getattr(distributed, "is_available", lambda: False)():
        return
    for name in COLLECTIVES:
        original = getattr(distributed, name, None)
        if callable(original):
            set_attribute(distributed, name, timed_collective(name, original, runtime))
