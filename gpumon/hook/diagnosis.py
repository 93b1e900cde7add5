"""A sync-count diagnosis window on the training thread: torch's sync debug mode over N steps, then a `diagnosis`."""

from __future__ import annotations

from collections import deque
from typing import Any

from gpumon import protocol
from gpumon.hook.sync_counter import SyncCounter


class SyncDiagnosis:
    """Counts host-device syncs per step over the window a `diagnose` request asked for; the result goes to `outbox`."""

    def __init__(self, torch: Any, outbox: deque[protocol.Message]) -> None:
        self.torch = torch
        self.outbox = outbox
        self.counter: SyncCounter | None = None
        self.left = 0
        """Steps the window still has to count (0: none running)."""
        self._request_id: Any = None
        self._per_step: list[int] = []
        self._base = 0

    @property
    def counting(self) -> bool:
        """Whether a window is counting syncs now."""
        counter = self.counter
        return counter is not None and counter.active

    def start(self, steps: int, request_id: Any) -> None:
        """Open a window of `steps` steps, or answer why none can be (another running, CUDA not initialized, a sync
        debug mode the job set itself)."""
        if self.counting:
            self.outbox.append(protocol.error_message(protocol.E_BUSY, "a diagnosis is already running", request_id))
            return
        cuda = self.torch.cuda
        if not cuda.is_initialized():
            reason: str | None = "CUDA is not initialized in this process: there is nothing to synchronize with"
        else:
            self.counter = SyncCounter(cuda.get_sync_debug_mode, cuda.set_sync_debug_mode)
            reason = self.counter.start()
        if reason is not None:
            self.outbox.append({"type": protocol.DIAGNOSIS, "id": request_id, "available": False, "reason": reason})
            return
        self.left = steps
        self._request_id = request_id
        self._per_step = []
        self._base = 0

    def syncs_since_last(self) -> int | None:
        """The syncs counted since the previous boundary while counting, else None."""
        counter = self.counter
        if counter is None or not counter.active:
            return None
        syncs = counter.count - self._base
        self._base = counter.count
        return syncs

    def step(self, syncs: int) -> None:
        """One step of the window ended with `syncs`; the last one sends the result."""
        self._per_step.append(syncs)
        self.left -= 1
        if self.left <= 0:
            self.finish()

    def finish(self) -> None:
        """End the window: stop counting and put its `diagnosis` in the outbox."""
        counter = self.counter
        if counter is None:
            return
        counter.stop()
        self.left = 0
        per_step = self._per_step
        self.outbox.append(
            {
                "type": protocol.DIAGNOSIS,
                "id": self._request_id,
                "available": True,
                "steps": len(per_step),
                "syncs_total": sum(per_step),
                "syncs_per_step": per_step,
                "sites": counter.top_sites(),
            }
        )
        self._per_step = []
