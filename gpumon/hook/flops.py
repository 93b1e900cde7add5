"""FLOPs of one sampled step, counted with torch.utils.flop_counter.FlopCounterMode between two step boundaries.

The counted step runs slower (every torch op passes through a Python dispatch mode, and module hooks are on), so
only one step is counted: step FIRST_STEP, then one in `every` (GPUMON_HOOK_FLOPS; 0: never) but at most one every
RECOUNT_GAP_S. The count covers
the ops FlopCounterMode knows (matmuls, convolutions, attention), forward and backward. Counting is skipped, with
a reason, where it would be wrong or unsafe: another dispatch mode is active, or torch.compile has compiled code
(its Inductor kernels are invisible to the mode). Any exception abandons the count; the job never sees it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from gpumon import protocol

FIRST_STEP = 30
"""The first step counted: after warm-up (cuDNN autotuning, lazy init), early enough to be seen soon."""
EVERY = 2000
"""Steps between counts after the first (GPUMON_HOOK_FLOPS overrides; 0 turns counting off)."""
RECOUNT_GAP_S = 600.0
"""Seconds at least between counts after the first: a counted step runs about 12x slower (CPU, 40 small Linear
layers), so one in 2000 alone would cost a launch-bound loop about 0.6% of its steps."""
EXIT_RETRIES = 64
"""Boundaries at which to retry leaving the mode when the job pushed its own dispatch mode on top of it."""


class FlopSampler:
    """Enters FlopCounterMode at the boundary before a sampled step and leaves it at the next boundary."""

    def __init__(
        self,
        torch: Any,
        on_error: Callable[[BaseException], None],
        every: int | None = None,
        recount_gap_s: float = RECOUNT_GAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._torch = torch
        self._on_error = on_error
        self.every = _every_from_env() if every is None else every
        self._recount_gap_s = recount_gap_s
        self._clock = clock
        self._counted_at: float | None = None
        self._counter: Any = None
        self._counting_seq = 0
        self._exit_retries = 0
        self.result: protocol.FlopCount | None = None

    @property
    def counting(self) -> bool:
        """Whether a step's FLOPs are being counted now (FlopCounterMode entered)."""
        return self._counter is not None

    def boundary(self, closed_seq: int, samples: int | None) -> None:
        """Step `closed_seq` just ended (with `samples`): finish its count if one ran, start one for the next step
        when it is due. Never raises."""
        try:
            if self._counter is not None:
                self._finish(closed_seq, samples)
            elif self.due(closed_seq + 1):
                self._start(closed_seq + 1)
        except Exception as exc:  # noqa: BLE001 - the job is never affected by counting
            self._abandon(exc)

    def next_boundary(self, closed_seq: int) -> int:
        """The first boundary after the one closing `closed_seq` at which a count may start (`due` says whether it
        does); sys.maxsize when counting is off."""
        if self.every <= 0:
            return sys.maxsize
        first_step = max(closed_seq + 2, FIRST_STEP)
        return first_step + (FIRST_STEP - first_step) % self.every - 1

    def due(self, seq: int) -> bool:
        """Step FIRST_STEP, then one in `every` once the recount gap has passed since the last count."""
        if self.every <= 0 or seq < FIRST_STEP or (seq - FIRST_STEP) % self.every:
            return False
        return self._counted_at is None or self._clock() - self._counted_at >= self._recount_gap_s

    def _start(self, seq: int) -> None:
        reason = self._unavailable()
        if reason is not None:
            self._report_unavailable(reason)
            return
        from torch.utils.flop_counter import FlopCounterMode

        counter: Any = FlopCounterMode(display=False)
        self._counted_at = self._clock()
        counter.__enter__()
        self._counter = counter
        self._counting_seq = seq
        self._exit_retries = 0

    def _finish(self, closed_seq: int, samples: int | None) -> None:
        counter = self._counter
        if not self._on_top(counter):
            # The job entered a dispatch mode of its own during the step and has not left it: popping now would
            # pop theirs. Wait for a boundary where ours is on top again (the count grows meanwhile: not used).
            self._exit_retries += 1
            if self._exit_retries == 1:
                self._report_unavailable("the job pushed a dispatch mode of its own during the counted step")
            if self._exit_retries > EXIT_RETRIES:
                self._counter = None  # give up; it stays beneath the job's mode and leaves with it
            return
        self._counter = None
        counter.__exit__(None, None, None)
        if self._exit_retries or closed_seq != self._counting_seq:
            return
        self.result = protocol.FlopCount(
            available=True,
            reason=None,
            flops_per_step=int(counter.get_total_flops()),
            conv_flops_per_step=_convolution_flops(counter),
            seq=closed_seq,
            samples=samples,
            t=round(time.time(), 3),
        )

    def _on_top(self, counter: Any) -> bool:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        return _get_current_dispatch_mode() is counter.mode

    def _unavailable(self) -> str | None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not None:
            return "another TorchDispatchMode is active at the step boundary"
        if _compiled_graphs() > 0:
            return "the job uses torch.compile: FlopCounterMode cannot see its compiled kernels"
        return None

    def _report_unavailable(self, reason: str) -> None:
        self.result = protocol.FlopCount(available=False, reason=reason, t=round(time.time(), 3))

    def _abandon(self, exc: BaseException) -> None:
        self._on_error(exc)
        counter, self._counter = self._counter, None
        if counter is not None and getattr(counter, "mode", None) is not None:
            try:
                if self._on_top(counter):
                    counter.__exit__(None, None, None)
            except Exception as again:  # noqa: BLE001
                self._on_error(again)
        self._report_unavailable(f"counting failed: {type(exc).__name__}: {exc}"[:200])

    def stop(self) -> None:
        """At exit or uninstall: leave the mode if it is still entered."""
        counter, self._counter = self._counter, None
        if counter is None:
            return
        try:
            if self._on_top(counter):
                counter.__exit__(None, None, None)
        except Exception as exc:  # noqa: BLE001
            self._on_error(exc)


def _compiled_graphs() -> int:
    """Graphs torch.compile has compiled in this process (0 when dynamo was never imported)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo_utils, "counters", None)
    if counters is None:
        return 0
    try:
        return int(counters["stats"]["unique_graphs"])
    except (KeyError, TypeError, ValueError):
        return 0


def _every_from_env() -> int:
    value = os.environ.get(protocol.FLOPS_ENV, "").strip()
    return int(value) if value.isdigit() else EVERY


def _convolution_flops(counter: Any) -> int:
    """The counted step's FLOPs in convolutions (forward and backward): cuDNN runs them in TF32 by default even where
    fp32 matmuls do not, so the peak they are held against differs."""
    try:
        per_op = counter.get_flop_counts().get("Global", {})
        return int(sum(flops for op, flops in per_op.items() if "convolution" in str(op)))
    except Exception:  # noqa: BLE001 - a torch whose counter lacks the breakdown: no split
        return 0
