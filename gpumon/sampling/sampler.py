"""The live sampler: a fast thread (GPU fast fields, host) and a slow one (NVML slow fields and health, processes)."""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gpumon.sampling.history import History
from gpumon.sampling.host import HostCollector
from gpumon.sampling.interval import MAX_RECORD_INTERVAL_S, clamp_interval
from gpumon.sampling.nvml import QUIET_ENERGY_INTERVAL, GpuCollector, SlowGpuReading
from gpumon.sampling.processes import ProcessCollector
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot
from gpumon.sampling.source import (
    INTERVAL_STEPS,
    SnapshotCallback,
    next_step,
)

log = logging.getLogger(__name__)

PRIME_WAIT = 0.2
"""Seconds between priming the rate counters (CPU, disks, GPM) and the first delivered snapshot."""
JOIN_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class _SlowState:
    """The latest slow-tier values, replaced whole so the fast thread reads a consistent set."""

    gpu_fields: dict[int, dict[str, Any]]
    processes: tuple[ProcessSample, ...]


_NO_SLOW_STATE = _SlowState(gpu_fields={}, processes=())


class Sampler:
    """A SnapshotSource over the live machine. Collectors default to the real ones (NVML, psutil)."""

    live = True

    def __init__(
        self,
        interval: float = 1.0,
        slow_interval: float = 2.0,
        gpu: GpuCollector | None = None,
        host: HostCollector | None = None,
        processes: ProcessCollector | None = None,
        history: History | None = None,
        extra_pids: Iterable[int] = (),
    ) -> None:
        self._interval = clamp_interval(interval, MAX_RECORD_INTERVAL_S)
        self._slow_interval = float(slow_interval)
        self.gpu = gpu if gpu is not None else GpuCollector()
        self.host = host if host is not None else HostCollector()
        self.processes = processes if processes is not None else ProcessCollector()
        self.history = history if history is not None else History()
        self.hostname = platform.node()
        self._extra_pids: tuple[int, ...] = tuple(extra_pids)
        self._slow = _NO_SLOW_STATE
        self._callback: SnapshotCallback | None = None
        self._paused = False
        self._stopped = threading.Event()
        self._fast_wake = threading.Event()
        self._slow_wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._closed = False

    # ---- SnapshotSource ------------------------------------------------------------------------

    @property
    def interval(self) -> float:
        """Seconds between fast-tier snapshots."""
        return self._interval

    @property
    def slow_interval(self) -> float:
        """Seconds between slow-tier reads: never shorter than the fast interval."""
        return max(self._slow_interval, self._interval)

    @property
    def paused(self) -> bool:
        """Whether sampling is paused."""
        return self._paused

    @property
    def description(self) -> str:
        """The title bar's word for a live source: 'live'."""
        return "live"

    def start(self, on_snapshot: SnapshotCallback) -> None:
        """Start both sampling threads; `on_snapshot` is called from the fast thread for every snapshot."""
        if self._threads:
            raise RuntimeError("this Sampler was already started")
        self._callback = on_snapshot
        self._threads = [
            threading.Thread(target=self._run_fast, name="gpumon-sampler-fast", daemon=True),
            threading.Thread(target=self._run_slow, name="gpumon-sampler-slow", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop and join both threads, then release NVML; safe to call twice."""
        self._stopped.set()
        self._wake()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=JOIN_TIMEOUT)
        if not self._closed:
            self._closed = True
            self.gpu.close()

    def pause(self) -> None:
        """Take no snapshots until `resume` (the threads wait)."""
        self._paused = True

    def resume(self) -> None:
        """Sample again, at once."""
        self._paused = False
        self._wake()

    def read_energy_often(self, often: bool) -> None:
        """The energy counter at every health read (a job's joules per sample need it), or every
        QUIET_ENERGY_INTERVAL (the dashboard's cumulative figure)."""
        self.gpu.energy_interval = self.gpu.health_interval if often else QUIET_ENERGY_INTERVAL

    def faster(self) -> None:
        """The next shorter interval (INTERVAL_STEPS)."""
        self.set_interval(next_step(INTERVAL_STEPS, self._interval, -1))

    def slower(self) -> None:
        """The next longer interval (INTERVAL_STEPS)."""
        self.set_interval(next_step(INTERVAL_STEPS, self._interval, 1))

    # ---- extras for the CLI and the attach layer -----------------------------------------------

    def set_interval(self, seconds: float) -> None:
        """Sample every `seconds` (clamped to the interval's range), from the next snapshot on."""
        self._interval = clamp_interval(seconds)
        self._wake()

    def track_pids(self, pids: Iterable[int]) -> None:
        """Also show these processes (and their descendants) even when they hold no GPU context."""
        self._extra_pids = tuple(pids)

    def sample_once(self, window: float = 0.5) -> Snapshot:
        """One complete snapshot, slow fields included, with rates measured over `window` seconds.

        Synchronous, no threads; the NVML session stays open for another call until `stop()`.
        """
        self.host.collect()
        self.gpu.collect_fast()
        self._collect_slow()
        time.sleep(max(0.0, window))
        self._collect_slow()
        snapshot = self._build_snapshot()
        self.history.add(snapshot)
        return snapshot

    # ---- the two threads ---------------------------------------------------------------------

    def _run_fast(self) -> None:
        try:
            self.host.collect()
            self.gpu.collect_fast()
        except Exception:  # the sampler thread never dies
            log.exception("priming the fast collectors failed")
        self._fast_wake.wait(PRIME_WAIT)
        self._fast_wake.clear()
        while not self._stopped.is_set():
            if self._paused:
                self._fast_wake.wait()
                self._fast_wake.clear()
                continue
            started = time.monotonic()
            self._fast_tick()
            self._sleep(self._fast_wake, self._interval - (time.monotonic() - started))

    def _run_slow(self) -> None:
        try:
            self.gpu.watch_xid_events()
        except Exception:  # the sampler thread never dies
            log.exception("starting the XID event thread failed")
        while not self._stopped.is_set():
            if self._paused:
                self._slow_wake.wait()
                self._slow_wake.clear()
                continue
            started = time.monotonic()
            try:
                self._collect_slow()
            except Exception:  # the sampler thread never dies
                log.exception("slow sampling tick failed")
            self._sleep(self._slow_wake, self.slow_interval - (time.monotonic() - started))

    def _fast_tick(self) -> None:
        try:
            snapshot = self._build_snapshot()
            self.history.add(snapshot)
        except Exception:  # the sampler thread never dies
            log.exception("fast sampling tick failed")
            return
        callback = self._callback
        if callback is None or self._stopped.is_set():
            return
        try:
            callback(snapshot)
        except Exception:  # a broken view must not stop sampling
            log.exception("snapshot callback raised")

    def _sleep(self, wake: threading.Event, seconds: float) -> None:
        if seconds > 0:
            wake.wait(seconds)
        wake.clear()

    def _wake(self) -> None:
        self._fast_wake.set()
        self._slow_wake.set()

    # ---- building snapshots --------------------------------------------------------------------

    def _collect_slow(self) -> None:
        reading: SlowGpuReading = self.gpu.collect_slow()
        processes = self.processes.collect(reading.processes, extra_pids=self._extra_pids)
        self._slow = _SlowState(gpu_fields=reading.fields, processes=processes)

    def _build_snapshot(self) -> Snapshot:
        timestamp = time.time()
        gpus = self.gpu.collect_fast()
        cpu, disks = self.host.collect()
        slow = self._slow
        return Snapshot(
            timestamp=timestamp,
            gpus=tuple(_merge(gpu, slow.gpu_fields.get(gpu.index)) for gpu in gpus),
            gpu_error=self.gpu.error,
            driver_version=self.gpu.driver_version,
            cpu=cpu,
            disks=disks,
            processes=slow.processes,
            hostname=self.hostname,
        )


def _merge(gpu: GpuSample, slow_fields: dict[str, Any] | None) -> GpuSample:
    """The fast sample with the slow tier's fields; a value the fast tier already has (GPM PCIe) wins."""
    if not slow_fields:
        return gpu
    updates = {name: value for name, value in slow_fields.items() if getattr(gpu, name) in (None, ())}
    return replace(gpu, **updates) if updates else gpu


def sample_once(window: float = 0.5, gpu: GpuCollector | None = None) -> Snapshot:
    """One complete snapshot of this machine (`gpumon snapshot`), rates over `window` seconds; NVML released after."""
    sampler = Sampler(gpu=gpu)
    try:
        return sampler.sample_once(window)
    finally:
        sampler.stop()
