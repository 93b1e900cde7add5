"""XID errors watched on an NVML event set, on their own thread: the latest few per GPU."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from gpumon.sampling.nvml_api import NvmlModule, describe_error
from gpumon.sampling.snapshot import XID_EVENTS_KEPT, XidEvent

log = logging.getLogger(__name__)

XID_WAIT_MS = 500
"""How long the XID thread waits for an event before it looks whether it should stop."""
XID_EVENT_TYPE = 0x8
"""nvmlEventTypeXidCriticalError."""


class XidWatcher:
    """Waits for XID errors on an NVML event set, on its own daemon thread; keeps the latest few per GPU.

    NVML's wait blocks in C (without the GIL) for at most XID_WAIT_MS, so stop() returns within about that long.
    The thread owns the event set: it creates it, waits on it, and frees it when it ends.
    """

    def __init__(
        self,
        nvml: NvmlModule,
        handles: Sequence[tuple[int, Any]],
        clock: Callable[[], float] = time.time,
        wait_ms: int = XID_WAIT_MS,
    ) -> None:
        self._nvml = nvml
        self._handles = tuple(handles)
        self._clock = clock
        self._wait_ms = wait_ms
        self._lock = threading.Lock()
        self._events: dict[int, deque[XidEvent]] = {}
        """GPU index -> its latest XID events; only GPUs registered on the event set have an entry."""
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 2.0) -> None:
        """Start the thread and wait (at most `timeout`) until it has registered the GPUs."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="gpumon-xid-events", daemon=True)
        self._thread.start()
        self._ready.wait(timeout)

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the thread to end; wait for it (at most `timeout`) so the event set is freed before NVML shuts down."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def running(self) -> bool:
        """Whether the watching thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def events(self, index: int) -> tuple[XidEvent, ...] | None:
        """The GPU's latest XID events, oldest first; None where XID errors are not watched on it."""
        with self._lock:
            kept = self._events.get(index)
            return tuple(kept) if kept is not None else None

    def _run(self) -> None:
        try:
            event_set = self._create()
        except Exception as error:  # noqa: BLE001 - no event set: XID errors are simply not watched
            log.info("XID errors not watched: %s", describe_error(error))
            self._ready.set()
            return
        try:
            self._ready.set()
            if self._events:
                self._wait_loop(event_set)
        finally:
            try:
                self._nvml.nvmlEventSetFree(event_set)
            except Exception:  # freeing on a broken NVML must not raise
                log.debug("NVML: freeing the event set failed", exc_info=True)

    def _create(self) -> Any:
        event_set = self._nvml.nvmlEventSetCreate()
        for index, handle in self._handles:
            try:
                self._nvml.nvmlDeviceRegisterEvents(handle, XID_EVENT_TYPE, event_set)
            except Exception as error:  # noqa: BLE001 - a GPU without XID events is shown as N/A
                log.debug("GPU %d: XID events not supported (%s)", index, describe_error(error))
                continue
            with self._lock:
                self._events[index] = deque(maxlen=XID_EVENTS_KEPT)
        return event_set

    def _wait_loop(self, event_set: Any) -> None:
        timeout_code = getattr(self._nvml, "NVML_ERROR_TIMEOUT", None)
        while not self._stopped.is_set():
            try:
                data = self._nvml.nvmlEventSetWait_v2(event_set, self._wait_ms)
            except self._nvml.NVMLError as error:
                if getattr(error, "value", None) == timeout_code:
                    continue
                log.info("XID watching stopped: %s", describe_error(error))
                with self._lock:
                    self._events.clear()
                return
            if int(data.eventType) & XID_EVENT_TYPE:
                self._record(data)

    def _record(self, data: Any) -> None:
        try:
            index = int(self._nvml.nvmlDeviceGetIndex(data.device))
        except Exception:  # an event of a GPU we cannot name is dropped
            log.debug("NVML: an XID event of an unnamed GPU dropped", exc_info=True)
            return
        event = XidEvent(timestamp=self._clock(), xid=int(data.eventData))
        log.warning("GPU %d: XID %d", index, event.xid)
        with self._lock:
            kept = self._events.get(index)
            if kept is not None:
                kept.append(event)
