"""GPU time per step from CUDA events, read back without ever waiting on the GPU."""

from __future__ import annotations

from collections import deque
from typing import Any

MAX_PENDING = 256
"""Steps whose events are not complete yet; beyond this the oldest is given up (gpu_ms None)."""
MAX_RESOLVE_PER_CALL = 16
MAX_COMM_PER_STEP = 1024
"""Collectives timed in one step (one per parameter in a hand-written all-reduce loop); more go untimed."""
_POOL_MAX = 32


class GpuStepTimer:
    """Times chosen steps with a start and an end event on the job's current stream, read later.

    Only `event.record()` and `event.query()` are called on the training thread; `elapsed_time` is
    read only once both events' `query()` is True, so nothing here synchronizes. A timed step starts
    at its first DataLoader batch (`mark_start`) or else at the boundary that opened it; untimed
    steps record no event at all. No event is recorded while a CUDA graph is being captured.
    Records leave in step order, each once its events completed (or it was not timed).
    """

    def __init__(self, torch: Any, device: int) -> None:
        self._torch = torch
        self.device = device
        self._capturing = torch.cuda.is_current_stream_capturing
        # The current stream, re-read as a cheap tuple each time; the Stream object only rebuilt on change.
        self._get_stream_key = getattr(getattr(torch, "_C", None), "_cuda_getCurrentStream", None)
        self._stream_key: Any = None
        self._stream: Any = None
        self._pool: list[Any] = []
        self._timed = False
        self._start: Any = None
        self._boundary_start: Any = None
        self._last_end: Any = None
        # FIFO of (record, start_event, end_event, collectives' event pairs); events None for an untimed step
        self._pending: deque[tuple[list[Any], Any, Any, tuple[tuple[Any, Any], ...]]] = deque()
        self._comm: list[tuple[Any, Any]] = []
        """The open timed step's torch.distributed calls: (before, after) events on the training stream."""

    def _event(self) -> Any:
        if self._pool:
            return self._pool.pop()
        return self._torch.cuda.Event(enable_timing=True)

    def _release(self, event: Any) -> None:
        if len(self._pool) < _POOL_MAX:
            self._pool.append(event)

    def _current_stream(self) -> Any:
        if self._get_stream_key is None:
            return self._torch.cuda.current_stream(self.device)
        key = self._get_stream_key(self.device)
        if key != self._stream_key:
            self._stream = self._torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2])
            self._stream_key = key
        return self._stream

    def _record(self) -> Any:
        """A fresh event recorded now on the current stream, or None during a graph capture."""
        if self._capturing():
            return None
        event = self._event()
        event.record(self._current_stream())
        return event

    @property
    def stream(self) -> Any:
        """The training stream events were last recorded on (None before, or where torch gives no stream key): the
        stack sampler asks it whether work is queued."""
        return self._stream

    @property
    def timed(self) -> bool:
        """The open step is timed (its first DataLoader batch marks its start: `mark_start`)."""
        return self._timed

    @property
    def idle(self) -> bool:
        """The open step is untimed and no record waits: closing it, and opening an untimed one, changes nothing here
        (the runtime's quiet boundaries skip end_step, begin_step and resolve)."""
        return not self._timed and not self._pending

    def begin_step(self, timed: bool, start_at_boundary: bool) -> None:
        """A step opens. `start_at_boundary`: mark its start now (no DataLoader batch will mark it)."""
        self._timed = timed
        self._start = None
        self._boundary_start = None
        self._comm = []
        if timed and start_at_boundary:
            # The step that just ended left its end event: the same instant, no new event needed.
            self._boundary_start = self._last_end if self._last_end is not None else self._record()
        self._last_end = None

    def mark_start(self) -> None:
        """The step's GPU work begins here (its first batch arrived). Later calls in the step are ignored."""
        if self._timed and self._start is None:
            self._start = self._record()

    def comm_begin(self) -> Any:
        """Before a collective of a timed step: an event on the training stream (None: the step is not timed)."""
        return self._record() if self._timed else None

    def comm_end(self, before: Any) -> None:
        """After it returned: the event the training stream reaches once the collective let it go on. A collective
        in sync mode makes the training stream wait for NCCL's, so the time between the two events is the time it
        waited: communication no compute hid."""
        if before is None:
            return
        after = self._record()
        if after is None:
            self._release(before)
        elif len(self._comm) < MAX_COMM_PER_STEP:
            self._comm.append((before, after))

    def end_step(self, record: list[Any]) -> None:
        """Close the step: record its end event if timed, and queue `record` until it can leave."""
        if not self._timed:
            self._pending.append((record, None, None, ()))
            return
        start = self._start if self._start is not None else self._boundary_start
        end = self._record() if start is not None else None
        self._last_end = end
        self._pending.append((record, start, end, tuple(self._comm)))
        self._comm = []

    def resolve(self, done: list[list[Any]], gpu_index: int, comm_index: int | None = None) -> None:
        """Move records whose events completed (oldest first) to `done`, with their GPU time filled in (and, at
        `comm_index`, the time the training stream waited in collectives, where the step made any)."""
        pending = self._pending
        for _ in range(MAX_RESOLVE_PER_CALL):
            if not pending:
                return
            record, start, end, comm = pending[0]
            timed = start is not None and end is not None
            complete = not timed or (end.query() and start.query())
            if not complete and len(pending) <= MAX_PENDING:
                return
            pending.popleft()
            if timed and complete:
                record[gpu_index] = start.elapsed_time(end)
                if comm and comm_index is not None:
                    # Recorded on the same stream before the end event: complete once it is.
                    record[comm_index] = sum(before.elapsed_time(after) for before, after in comm)
                self._release(start)
                # An end event may be the next step's start (open, or queued); only then is it kept.
                if end is not self._boundary_start and not (pending and pending[0][1] is end):
                    self._release(end)
                for before, after in comm:
                    self._release(before)
                    self._release(after)
            done.append(record)

    def flush(self, done: list[list[Any]], gpu_index: int, comm_index: int | None = None) -> None:
        """Give every pending record back (exit): GPU time where already complete, else None."""
        for record, start, end, comm in self._pending:
            if start is not None and end is not None and end.query() and start.query():
                record[gpu_index] = start.elapsed_time(end)
                if comm and comm_index is not None:
                    record[comm_index] = sum(before.elapsed_time(after) for before, after in comm)
            done.append(record)
        self._pending.clear()
