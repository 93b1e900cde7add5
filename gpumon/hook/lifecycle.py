"""Installing the hook: once per process, after torch is imported, inert in forked children.

`install()` itself imports nothing heavy. When torch is already imported the patches go on at once;
otherwise a meta-path finder waits for `import torch` to finish and installs then, so importing
gpumon.hook (or the injected sitecustomize) never imports torch on its own.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Any

from gpumon.hook.env import say_once
from gpumon.printable import printable
from gpumon.protocol import HOOK_ENV, INJECTED_ENV, KNOBS_ENV, SAMPLE_HZ_ENV

_lock = threading.Lock()
_state: _HookState | None = None
_process_hooks_registered = False


class _HookState:
    def __init__(self, lazy: bool, injected: bool) -> None:
        self.pid = os.getpid()
        self.lazy = lazy
        self.injected = injected
        self.installed_at = time.time()
        self.runtime: Any = None
        self.patches: Any = None
        self.server: Any = None
        self.watcher: _TorchImportWatcher | None = None
        self.forked_child = False


def disabled_by_env() -> bool:
    """Whether GPUMON_HOOK turns the hook off (0, false, off, no)."""
    return os.environ.get(HOOK_ENV, "").strip().lower() in ("0", "false", "off", "no")


def in_multiprocessing_child() -> bool:
    """A spawn/forkserver child of multiprocessing (e.g. a DataLoader worker) re-importing __main__."""
    if "--multiprocessing-fork" in sys.argv:
        return True
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return False
    try:
        if process.parent_process() is not None:
            return True
        return bool(getattr(process.current_process(), "_inheriting", False))
    except Exception:  # noqa: BLE001
        return False


def install(*, lazy: bool | None = None) -> bool:
    """Install the hook in this process (idempotent). Returns True when installed or already installed.

    lazy: start the socket server only at the first sign of training (a DataLoader batch, backward,
    an optimizer step, `step()`); default: lazy when injected by `gpumon run` or inside a
    multiprocessing child, immediate otherwise.
    """
    global _state
    try:
        if disabled_by_env():
            return False
        with _lock:
            if _state is not None:
                return not _state.forked_child
            injected = os.environ.get(INJECTED_ENV, "") not in ("", "0")
            if lazy is None:
                lazy = injected or in_multiprocessing_child()
            state = _HookState(lazy=lazy, injected=injected)
            _state = state
            _register_process_hooks()
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "autograd"):
            _on_torch_imported()
        else:
            state.watcher = _TorchImportWatcher()
            sys.meta_path.insert(0, state.watcher)
        return True
    except Exception:  # noqa: BLE001 - installing must never break the job
        return False


def uninstall() -> None:
    """Remove the patches, stop the server and forget the state (tests and benchmarks use this)."""
    global _state
    state = _state
    if state is None or state.pid != os.getpid():
        return
    _state = None
    try:
        if state.watcher is not None and state.watcher in sys.meta_path:
            sys.meta_path.remove(state.watcher)
        if state.runtime is not None:
            state.runtime.active = False
            state.runtime.budget.stop()
            state.runtime.gc_timer.stop()
            if state.runtime.sampler is not None:
                state.runtime.sampler.stop()
        if state.patches is not None:
            state.patches.remove()
        if state.server is not None:
            state.server.stop("uninstall")
    except Exception:  # noqa: BLE001
        pass


def step(samples: int | None = None) -> None:
    """Mark the end of a training step (for loops the hook cannot see). From then on only these marks count."""
    state = _state
    runtime = state.runtime if state is not None else None
    if runtime is None or not runtime.active:
        return
    try:
        runtime.on_manual_step(None if samples is None else int(samples))
    except Exception as exc:  # noqa: BLE001
        runtime.error(exc)


def is_installed() -> bool:
    """Whether the hook is installed in this process (not a forked child that inherited it)."""
    state = _state
    return state is not None and not state.forked_child and state.pid == os.getpid()


def runtime() -> Any:
    """The HookRuntime of this process, None before torch is imported or when not installed."""
    state = _state
    return state.runtime if state is not None and not state.forked_child else None


def server() -> Any:
    """The HookServer of this process, None until it started (or when it could not)."""
    state = _state
    return state.server if state is not None and not state.forked_child else None


def _on_torch_imported() -> None:
    """Put the patches on and start (or arm) the server. Runs once torch is fully imported."""
    state = _state
    if state is None or state.runtime is not None or state.forked_child:
        return
    try:
        import torch

        from gpumon.hook.patches import install_patches
        from gpumon.hook.runtime import HookRuntime

        runtime = HookRuntime(torch)
        state.runtime = runtime
        knobs = os.environ.get(KNOBS_ENV)
        if knobs:
            runtime.set_env_knobs(knobs)
        state.patches = install_patches(torch, runtime)
        runtime.gc_timer.start()
        if state.lazy:
            runtime.on_first_activity = _start_server
        else:
            _start_server()
    except Exception:  # noqa: BLE001
        pass


def _start_server() -> None:
    state = _state
    if state is None or state.server is not None or state.runtime is None:
        return
    try:
        from gpumon.hook.server import HookServer

        server = HookServer(state.runtime, installed_at=state.installed_at, injected=state.injected)
        _start_sampler(state.runtime)  # before the socket appears: a monitor that finds it finds every hook thread
        if server.start():
            state.server = server
        else:  # serving nowhere: gpumon cannot find the job, so its log says why (once)
            _stop_sampler(state.runtime)
            say_once(f"not serving, gpumon cannot see this job: {printable(server.failure or 'no socket')}"[:500])
    except Exception as exc:  # noqa: BLE001
        state.runtime.error(exc)


def _start_sampler(runtime: Any) -> None:
    """The stack sampler, at GPUMON_HOOK_SAMPLE_HZ samples a second (default 20; 0: none)."""
    from gpumon.hook.env import env_count
    from gpumon.hook.stack_sampler import SAMPLE_HZ, make_sampler

    sampler = make_sampler(runtime, runtime.torch, env_count(SAMPLE_HZ_ENV, SAMPLE_HZ))
    if sampler is not None:
        runtime.sampler = sampler
        runtime.gc_timer.stream_idle = sampler.stream_idle_now
        sampler.start()


def _stop_sampler(runtime: Any) -> None:
    sampler = getattr(runtime, "sampler", None)
    gc_timer = getattr(runtime, "gc_timer", None)
    if gc_timer is not None:
        gc_timer.stream_idle = None
    if sampler is not None:
        sampler.stop()
        sampler.join(0.5)  # once, at start-up, only when the hook cannot serve
        runtime.sampler = None


def _register_process_hooks() -> None:
    global _process_hooks_registered
    if _process_hooks_registered:
        return
    _process_hooks_registered = True
    atexit.register(_at_exit)
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    state = _state
    if state is None or state.pid != os.getpid() or state.forked_child:
        return
    try:
        if state.runtime is not None:
            state.runtime.flush()
    except Exception as exc:  # noqa: BLE001
        state.runtime.error(exc)
    try:
        if state.server is not None:
            state.server.stop("exit")
    except Exception:  # noqa: BLE001
        pass


def _after_fork_in_child() -> None:
    """A forked child (e.g. a DataLoader worker): patches inert, no server, the parent's socket left alone."""
    state = _state
    if state is None:
        return
    try:
        state.forked_child = True
        if state.runtime is not None:
            state.runtime.active = False
            state.runtime.on_first_activity = None
            state.runtime.budget.stop()  # the step budget's wrappers, if the fork came in a budgeted step
            state.runtime.gc_timer.stop()
            state.runtime.flops.stop()  # the FLOP counter's dispatch mode, if the fork came in a counted step
            if state.runtime.sampler is not None:
                state.runtime.sampler.forget_in_child()
        if state.server is not None:
            state.server.close_in_child()
        if state.watcher is not None and state.watcher in sys.meta_path:
            sys.meta_path.remove(state.watcher)
    except Exception:  # noqa: BLE001
        pass


class _TorchImportWatcher:
    """A meta-path finder that lets `import torch` run as usual and installs the hook right after it."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        spec = None
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        loader = spec.loader
        original_exec = getattr(loader, "exec_module", None)
        if original_exec is None:
            return spec

        def exec_module(module: Any) -> None:
            original_exec(module)
            _on_torch_imported()

        try:
            loader.exec_module = exec_module  # this loader instance serves only this import of torch
        except (AttributeError, TypeError):
            pass
        return spec

    def invalidate_caches(self) -> None:
        pass
