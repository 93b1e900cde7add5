"""`gpumon fleet`'s data path end to end: a real Prometheus scrapes two simulated nodes (exporters replaying
different recordings under their own host labels) and read_fleet turns its answers into one FleetSnapshot."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from exporter_helpers import RECORDINGS, running_exporter, wait_until
from prometheus_helpers import NO_BINARY, STARTUP_TIMEOUT, prometheus_binary, query_by_host, running_prometheus

from gpumon.fleet import PromClient, read_fleet
from gpumon.sampling.recording import read_recording

NODES = {"sim-node-a": "h100-training.jsonl", "sim-node-b": "h100-demo-slow.jsonl"}


def test_fleet_snapshot_holds_both_nodes_with_their_recorded_values(tmp_path: Path) -> None:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(NO_BINARY)
    last = {host: read_recording(RECORDINGS / name)[-1] for host, name in NODES.items()}
    with ExitStack() as stack:
        exporters = [
            stack.enter_context(
                running_exporter("--replay", str(RECORDINGS / name), "--speed", "32", "--host-label", host)
            )
            for host, name in NODES.items()
        ]
        base = stack.enter_context(running_prometheus(binary, tmp_path, [exporter.url for exporter in exporters]))

        def replays_done() -> bool:
            stamps = query_by_host(base, "gpumon_snapshot_timestamp_seconds")
            return all(stamps.get(host) == snapshot.timestamp for host, snapshot in last.items())

        wait_until(replays_done, STARTUP_TIMEOUT, "the recordings' last snapshots in Prometheus", interval=0.25)
        snapshot = read_fleet(PromClient(base))
    assert snapshot.error is None, snapshot.error
    assert snapshot.hosts == tuple(sorted(NODES))
    rows = {row.host: row for row in snapshot.gpus}
    for host, recorded in last.items():
        gpu = recorded.gpus[0]
        row = rows[host]
        assert row.utilization == pytest.approx(gpu.utilization_gpu)
        assert row.sm_active == pytest.approx(gpu.sm_activity)
        assert row.memory_used == gpu.memory_used and row.memory_total == gpu.memory_total
        assert row.utilization_history[-1] == pytest.approx(gpu.utilization_gpu)
    assert snapshot.jobs == ()  # replaying exporters attach to no jobs
