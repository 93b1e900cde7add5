"""NVTX ranges for the parts of a step the hook sees (GPUMON_NVTX=1), so that an nsys timeline shows gpumon's steps.

A step range runs from one step boundary to the next; inside it, ranges for the DataLoader's data wait, the
forward pass (the outermost module call), backward and the optimizer step. Ranges are kept as one stack on the
training thread: closing one also closes any opened inside it and left open (an exception skipped its close), and
each step boundary closes everything before the next step opens, so the ranges stay balanced whatever the job
raises. Nothing here runs unless the variable is set; when torch has no NVTX (a CPU build) the first push fails,
which is said once, and the ranges stay off.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from gpumon import protocol
from gpumon.hook.env import env_switch, say_once

STEP = "step"
DATA_WAIT = "data wait"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
MAX_OPEN = 8
"""Ranges open at once, at most (a step and what nests in it need four)."""


def nvtx_requested() -> bool:
    """Whether GPUMON_NVTX asks for the NVTX ranges."""
    return env_switch(protocol.NVTX_ENV)


class NvtxRanges:
    """The hook's open NVTX ranges on the training thread (the first thread to open one)."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self.enabled = True
        self._push: Callable[[str], Any] | None = None
        self._pop: Callable[[], Any] | None = None
        self._thread = 0
        self._open: list[str] = []
        self._forward_module: Any = None
        self._module_hooks: list[Any] = []

    # -- the stack -----------------------------------------------------------------------------

    def open(self, name: str) -> bool:
        """Push a range named `name`; False when it was not (off, another thread, too deep, NVTX missing)."""
        if not self.enabled:
            return False
        thread = threading.get_ident()
        if thread != self._thread:
            if self._thread:
                return False
            self._thread = thread
        if len(self._open) >= MAX_OPEN:
            return False
        try:
            push = self._push
            if push is None:  # bound at first use: the job's torch.cuda.nvtx as it is once training starts
                nvtx = self._torch.cuda.nvtx
                push, self._pop = nvtx.range_push, nvtx.range_pop
                self._push = push
            push(name)
        except Exception as exc:  # noqa: BLE001 - e.g. "NVTX functions not installed" on a CPU build
            self._turn_off(exc)
            self._remove_module_hooks()
            return False
        self._open.append(name)
        return True

    def close(self, name: str) -> None:
        """Pop the innermost open range named `name` and every range opened inside it; nothing if none is open."""
        if name == FORWARD:
            self._forward_module = None
        if name not in self._open or threading.get_ident() != self._thread:
            return
        while self._open:
            top = self._open.pop()
            if not self._pop_one() or top == name:
                return

    def close_all(self) -> None:
        """Pop every open range (at a step boundary, at exit); from another thread, forget them (NVTX stacks are
        per thread)."""
        self._forward_module = None
        if threading.get_ident() != self._thread:
            self._open.clear()
            return
        while self._open:
            self._open.pop()
            if not self._pop_one():
                return

    def step(self) -> None:
        """A step boundary: whatever is open ends, the next step's range begins."""
        self.close_all()
        self.open(STEP)

    def _pop_one(self) -> bool:
        try:
            pop = self._pop
            if pop is not None:
                pop()
            return True
        except Exception as exc:  # noqa: BLE001
            self._turn_off(exc)
            return False

    def _turn_off(self, exc: BaseException) -> None:
        self.enabled = False
        self._open.clear()
        say_once(f"NVTX ranges off: {type(exc).__name__}: {exc}"[:300])

    def _remove_module_hooks(self) -> None:
        """Off for good: module calls stop paying for the forward hooks. Only these: removing them is safe wherever
        open() runs (torch copies its global forward hooks before calling them), the optimizer hooks inside their
        own loop would not be (their removers still run at uninstall)."""
        while self._module_hooks:
            self._module_hooks.pop().remove()

    @property
    def depth(self) -> int:
        """How many ranges are open now."""
        return len(self._open)

    # -- forward and optimizer, seen through torch's global hooks ---------------------------------

    def install(self, active: Callable[[], bool], is_compiling: Callable[[], bool]) -> list[Callable[[], None]]:
        """Register the module forward and optimizer step hooks; returns what removes them (and closes the ranges).
        `active`: whether the hook is on in this process. Each hook first asks `is_compiling` and returns at once
        inside a torch.compile trace, so the trace sees nothing of this object (it cannot trace the module it holds)."""
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optimizer_module

        def forward_pre_hook(module: Any, args: Any) -> None:
            if is_compiling():
                return
            if self._forward_module is None and self.enabled and active() and self.open(FORWARD):
                self._forward_module = module

        def forward_hook(module: Any, args: Any, output: Any) -> None:
            if is_compiling():
                return
            if module is self._forward_module:
                self.close(FORWARD)

        def optimizer_pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not is_compiling() and self.enabled and active():
                self.open(OPTIMIZER)

        def optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not is_compiling() and self.enabled and active():
                self.close(OPTIMIZER)

        module_hooks = [nn_module.register_module_forward_pre_hook(forward_pre_hook)]
        try:  # always_call: closed even when the forward raises
            module_hooks.append(nn_module.register_module_forward_hook(forward_hook, always_call=True))
        except TypeError:
            module_hooks.append(nn_module.register_module_forward_hook(forward_hook))
        self._module_hooks = list(module_hooks)
        optimizer_hooks = [
            optimizer_module.register_optimizer_step_pre_hook(optimizer_pre_hook),
            optimizer_module.register_optimizer_step_post_hook(optimizer_post_hook),
        ]
        return [*(handle.remove for handle in (*module_hooks, *optimizer_hooks)), self.close_all]
