"""The wrappers the hook puts around torch functions, and how they are put on and taken off.

Each wrapper calls the original with the same arguments and returns its result; the original's
exceptions pass through untouched. The hook's own code runs in `try` blocks whose errors are only
counted (HookRuntime.error). When the runtime is inactive (a forked child, or uninstalled) the
wrappers do nothing but call the original.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gpumon.hook.comm_timer import wrap_collectives
from gpumon.hook.nvtx import BACKWARD
from gpumon.hook.runtime import HookRuntime


class Patches:
    """The installed wrappers of one runtime; `remove()` puts the originals back."""

    def __init__(self) -> None:
        self._restore: list[Callable[[], None]] = []

    def _set(self, owner: Any, name: str, value: Any) -> None:
        original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, value)
        self._restore.append(lambda: setattr(owner, name, original))

    def remove(self) -> None:
        """Put the originals back, the last patched first (best effort: one that fails is skipped)."""
        while self._restore:
            try:
                self._restore.pop()()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass


def install_patches(torch: Any, runtime: HookRuntime) -> Patches:
    """Wrap DataLoader iteration, backward, autocast entry, torch.cuda.empty_cache (counted, timed, its line kept),
    torch.distributed's collectives (timed on GPU-timed steps), and hook every optimizer step (with GPUMON_NVTX, every
    module's forward and optimizer step too, for the NVTX ranges)."""
    from torch.amp import autocast_mode
    from torch.optim import optimizer as optimizer_module
    from torch.utils.data import dataloader

    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
    patches = Patches()

    iter_class = dataloader._BaseDataLoaderIter
    original_next = iter_class.__dict__["__next__"]

    patches._set(iter_class, "__next__", functools.wraps(original_next)(runtime.dataloader_next(original_next)))

    loader_class = dataloader.DataLoader
    original_iter = loader_class.__dict__["__iter__"]

    @functools.wraps(original_iter)
    def __iter__(self: Any) -> Any:
        if not runtime.active:
            return original_iter(self)
        try:
            runtime.on_loader_iter_begin(self)
        except Exception as exc:  # noqa: BLE001
            runtime.error(exc)
        iterator = original_iter(self)
        try:
            runtime.on_loader_iter_end(self, iterator)
        except Exception as exc:  # noqa: BLE001
            runtime.error(exc)
        return iterator

    patches._set(loader_class, "__iter__", __iter__)

    original_backward = torch.autograd.backward

    @functools.wraps(original_backward)
    def backward(*args: Any, **kwargs: Any) -> Any:
        ranges = runtime.nvtx
        if not runtime.backward_matters and ranges is None:
            # An optimizer marks the steps and NVTX is off: nothing will be done here again, so torch gets its own
            # function back (a wrapper that only passes the call on still costs a few us a step, run cold).
            if torch.autograd.backward is backward:
                torch.autograd.backward = original_backward
            return original_backward(*args, **kwargs)
        if runtime.active and not is_compiling():
            if runtime.backward_matters:
                try:
                    runtime.on_backward()
                except Exception as exc:  # noqa: BLE001
                    runtime.error(exc)
            if ranges is not None and ranges.open(BACKWARD):
                try:
                    return original_backward(*args, **kwargs)
                finally:
                    ranges.close(BACKWARD)
        return original_backward(*args, **kwargs)

    patches._set(torch.autograd, "backward", backward)

    autocast_class = autocast_mode.autocast
    original_enter = autocast_class.__dict__["__enter__"]

    @functools.wraps(original_enter)
    def __enter__(self: Any) -> Any:
        if runtime.active and not is_compiling():
            try:
                runtime.on_autocast_enter(self)
            except Exception as exc:  # noqa: BLE001
                runtime.error(exc)
        return original_enter(self)

    patches._set(autocast_class, "__enter__", __enter__)

    try:
        wrap_empty_cache(torch, runtime, patches._set)
    except Exception as exc:  # noqa: BLE001 - the other patches stand without it
        runtime.error(exc)

    handle = optimizer_module.register_optimizer_step_post_hook(runtime.optimizer_step_hook)
    patches._restore.append(handle.remove)
    if runtime.nvtx is not None:
        patches._restore.extend(runtime.nvtx.install(lambda: runtime.active, is_compiling))
    try:
        wrap_collectives(torch, runtime, patches._set)
    except Exception as exc:  # noqa: BLE001 - the other patches stand without these
        runtime.error(exc)
    return patches


def wrap_empty_cache(torch: Any, runtime: HookRuntime, set_attribute: Callable[[Any, str, Any], None]) -> None:
    """One counting wrapper for torch.cuda.empty_cache, put where the job finds it: torch.cuda and torch.cuda.memory
    (the same function; a job that imported it by name before the hook keeps the original)."""
    memory = getattr(torch.cuda, "memory", None)
    original = getattr(torch.cuda, "empty_cache", None)
    if original is None:
        return
    wrapper = runtime.empty_cache.wrap(original, torch.cuda)
    set_attribute(torch.cuda, "empty_cache", wrapper)
    if memory is not None and getattr(memory, "empty_cache", None) is original:
        set_attribute(memory, "empty_cache", wrapper)
