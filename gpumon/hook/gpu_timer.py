"""GPU time per step from CUDA events, read back without ever waiting on the GPU."""

from __future__ import annotations

from collections import deque
from typing import Any

MAX_PENDING = 256
"""Steps whose events are not complete yet; beyond this the oldest is given up (gpu_ms None)."""
MAX_RESOLVE_PER_CALL = 16
_POOL_MAX = 32


class GpuStepTimer:
    """Records a start and an end event per step on the job's current stream and reads them later.

    Only `event.record()` and `event.query()` are called on the training thread; `elapsed_time` is
    read only once the end event's `query()` is True, so nothing here synchronizes. A step with no
    start mark of its own (no DataLoader fetch) starts at the previous step's end event.
    """

    def __init__(self, torch: Any, device: int) -> None:
        self._torch = torch
        self.device = device
        self._pool: list[Any] = []
        self._start: Any = None
        self._prev_end: Any = None
        # FIFO of (record, start_event, end_event)
        self._pending: deque[tuple[list[Any], Any, Any]] = deque()

    def _event(self) -> Any:
        if self._pool:
            return self._pool.pop()
        return self._torch.cuda.Event(enable_timing=True)

    def _release(self, event: Any) -> None:
        if len(self._pool) < _POOL_MAX:
            self._pool.append(event)

    def _record(self) -> Any:
        event = self._event()
        event.record(self._torch.cuda.current_stream(self.device))
        return event

    def mark_start(self) -> None:
        """The step's GPU work begins here (after its first batch arrived). Later calls in the step are ignored."""
        if self._start is None:
            self._start = self._record()

    def end_step(self, record: list[Any]) -> None:
        """Close the step: record its end event and queue `record` until its GPU time can be read."""
        start = self._start if self._start is not None else self._prev_end
        end = self._record()
        self._start = None
        self._prev_end = end
        self._pending.append((record, start, end))

    def end_unmeasured(self, record: list[Any]) -> None:
        """Close a step without events (a CUDA graph capture is running): it keeps its place in line."""
        self._start = None
        self._prev_end = None
        self._pending.append((record, None, None))

    def resolve(self, done: list[list[Any]], gpu_index: int) -> None:
        """Move records whose events completed (oldest first) to `done`, with their GPU time filled in."""
        pending = self._pending
        for _ in range(MAX_RESOLVE_PER_CALL):
            if not pending:
                return
            record, start, end = pending[0]
            complete = end is None or (end.query() and (start is None or start.query()))
            if not complete and len(pending) <= MAX_PENDING:
                return
            pending.popleft()
            if complete and start is not None and end is not None:
                record[gpu_index] = start.elapsed_time(end)
                self._release(start)
                # An end event may still be the next step's start; only then is it kept.
                if end is not self._prev_end and not (pending and pending[0][1] is end):
                    self._release(end)
            done.append(record)

    def flush(self, done: list[list[Any]], gpu_index: int) -> None:
        """Give every pending record back (exit): GPU time where already complete, else None."""
        for record, start, end in self._pending:
            if start is not None and end is not None and end.query() and start.query():
                record[gpu_index] = start.elapsed_time(end)
            done.append(record)
        self._pending.clear()
