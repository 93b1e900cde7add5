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

    @property
    def depth(self) -> int:
        return len(self._open)

    # -- forward and optimizer, seen through torch's global hooks ---------------------------------

    def install(self, live: Callable[[], bool]) -> list[Callable[[], None]]:
        """Register the module forward and optimizer step hooks; returns what removes them (and closes the ranges).
        `live`: whether the hook is on in this process and not inside a torch.compile trace."""
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optimizer_module

        def forward_pre_hook(module: Any, args: Any) -> None:
            if self._forward_module is None and self.enabled and live() and self.open(FORWARD):
                self._forward_module = module

        def forward_hook(module: Any, args: Any, output: Any) -> None:
            if module is self._forward_module:
                self.close(FORWARD)

        def optimizer_pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if self.enabled and live():
                self.open(OPTIMIZER)

        def optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if self.enabled and live():
                self.close(OPTIMIZER)

        handles = [nn_module.register_module_forward_pre_hook(forward_pre_hook)]
        try:  # always_call: closed even when the forward raises
            handles.append(nn_module.register_module_forward_hook(forward_hook, always_call=True))
        except TypeError:
            handles.append(nn_module.register_module_forward_hook(forward_hook))
        handles.append(optimizer_module.register_optimizer_step_pre_hook(optimizer_pre_hook))
        handles.append(optimizer_module.register_optimizer_step_post_hook(optimizer_post_hook))
        return [*(handle.remove for handle in handles), self.close_all]
