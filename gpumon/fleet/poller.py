"""A daemon thread that reads a FleetSnapshot every interval and hands it to a callback (never on the UI thread)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from gpumon.fleet.client import PromClient
from gpumon.fleet.hosts import STALE_AFTER
from gpumon.fleet.snapshot import QUERIES_PER_ROUND, FleetSnapshot, read_fleet
from gpumon.printable import printable


class FleetPoller:
    """Calls `on_snapshot` from its own thread with each new snapshot until stop()."""

    def __init__(
        self,
        client: PromClient,
        interval: float,
        on_snapshot: Callable[[FleetSnapshot], None],
        stale_after: float = STALE_AFTER,
    ) -> None:
        self.client = client
        self.interval = interval
        self.stale_after = stale_after
        self._on_snapshot = on_snapshot
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpumon-fleet-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, join_timeout: float | None = None) -> None:
        """Stop polling; wait up to `join_timeout` seconds (default: the longest one round of queries takes)."""
        self._stop.set()
        wait = self.client.timeout * QUERIES_PER_ROUND + 1 if join_timeout is None else join_timeout
        if wait > 0 and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=wait)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                snapshot = read_fleet(self.client, stale_after=self.stale_after)
            except Exception as error:  # noqa: BLE001 - one bad round is one line; the next round runs
                line = " ".join(f"{type(error).__name__}: {error}".split())[:200]
                snapshot = FleetSnapshot(taken=time.time(), error=f"reading Prometheus failed: {printable(line)}")
            if self._stop.is_set():
                return
            try:
                self._on_snapshot(snapshot)
            except RuntimeError:  # the app is gone (call_from_thread after exit)
                return
            self._stop.wait(self.interval)
