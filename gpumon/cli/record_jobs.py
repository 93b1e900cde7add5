"""The hooked jobs beside `gpumon record`: followed on a thread of their own, each one's bounded entry and the
advisor's finding written with every snapshot (docs/schema.md, "Job entry")."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import build_signals
from gpumon.jobs import JobClient, scan
from gpumon.jobs.recorded import EntryWriter
from gpumon.jobs.step_sums import window_sums
from gpumon.sampling.snapshot import Snapshot

log = logging.getLogger(__name__)

MAX_JOBS = 64
"""Hooked processes recorded at once (each costs a reader thread); more are left out until some end."""
DISCOVERY_INTERVAL_S = 10.0
"""Seconds between looks for new hooked jobs."""
FINDING_EVERY_S = 1.0
"""The advisor's finding is worked out at most this often per job (and once per snapshot interval when longer)."""
FINDING_WINDOW_S = 10.0
"""The window each finding covers: the dashboard advisor's."""
SNAPSHOTS_KEPT = 120
"""Snapshots kept for the findings' window (10 s at the fastest interval, 0.1 s)."""

TrackPids = Callable[[Iterable[int]], None]


class JobRecorder:
    """Follows every hooked job this user may see; `entries(snapshot)` hands out their entries for one line.

    Discovery and the findings run on the thread "gpumon-record-jobs"; the entries are made on the caller's (the
    sampler's) thread from what the job clients collected, so a slow diagnosis never delays a snapshot.
    """

    def __init__(
        self,
        *,
        track: TrackPids | None = None,
        discovery_interval: float = DISCOVERY_INTERVAL_S,
        finding_every: float = FINDING_EVERY_S,
    ) -> None:
        self.track = track
        self.discovery_interval = discovery_interval
        self.finding_every = finding_every
        self._clients: dict[int, JobClient] = {}
        self._writers: dict[int, EntryWriter] = {}
        self._findings: dict[int, dict[str, Any] | None] = {}
        """Findings worked out since the last entry, by pid (None: no step in the window)."""
        self._lock = threading.Lock()
        self._snapshots: deque[Snapshot] = deque(maxlen=SNAPSHOTS_KEPT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpumon-record-jobs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            clients = list(self._clients.values())
        for client in clients:
            client.stop()

    def entries(self, snapshot: Snapshot) -> list[dict[str, Any]]:
        """Every followed job's entry for the line of `snapshot`, its finding added where one was worked out."""
        with self._lock:
            self._snapshots.append(snapshot)
            followed = [(self._clients[pid], writer) for pid, writer in self._writers.items()]
            findings, self._findings = self._findings, {}
        entries = []
        for client, writer in followed:
            entry = writer.entry(client.view())
            if entry is None:
                continue
            if client.pid in findings:
                entry["finding"] = findings[client.pid]
            entries.append(entry)
        return entries

    # ---- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        next_discovery = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_discovery:
                    self.discover()
                    next_discovery = time.monotonic() + self.discovery_interval
                self.diagnose()
            except Exception:  # the thread never dies: one bad job or scan must not end the recording's job data
                log.exception("recording the hooked jobs failed")
            self._stop.wait(self.finding_every)

    def discover(self) -> None:
        """Follow new hooked jobs, forget ended ones whose end was written, have the sampler track their processes."""
        with self._lock:
            for pid, client in list(self._clients.items()):
                if client.ended and self._writers[pid].end_written:
                    client.stop()
                    del self._clients[pid], self._writers[pid]
            known = set(self._clients)
        for info in scan(clean=False).jobs:
            if len(known) >= MAX_JOBS:
                break
            if info.pid in known or not info.compatible:
                continue
            client = JobClient(info)
            writer = EntryWriter(info)
            client.add_message_listener(writer.take)
            client.start()
            known.add(info.pid)
            with self._lock:
                self._clients[info.pid] = client
                self._writers[info.pid] = writer
        if self.track is not None:
            self.track(sorted(known))

    def diagnose(self) -> None:
        """Work out each live job's finding over the last FINDING_WINDOW_S, for its next entry."""
        with self._lock:
            clients = list(self._clients.values())
            snapshots = list(self._snapshots)
        if not snapshots:
            return
        end = snapshots[-1].timestamp
        start = end - FINDING_WINDOW_S
        window = [snapshot for snapshot in snapshots if snapshot.timestamp >= start]
        for client in clients:
            view = client.view()
            if view.ended:
                continue
            finding = None
            if window_sums(view.step_sums, start, end).steps > 0:
                finding = diagnose(build_signals(window, view, start=start, end=end)).to_dict()
            with self._lock:
                self._findings[client.pid] = finding
