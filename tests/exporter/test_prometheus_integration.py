"""A real Prometheus (the Debian `prometheus` binary) scrapes two simulated nodes: two exporters on 127.0.0.1,
each replaying a different real recording under its own host label; its HTTP API then answers with their values."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from exporter_helpers import RECORDINGS, running_exporter, wait_until
from prometheus_helpers import NO_BINARY, STARTUP_TIMEOUT, api, prometheus_binary, query_by_host, running_prometheus

from gpumon.sampling.recording import read_recording

NODES = {"sim-node-a": "h100-training.jsonl", "sim-node-b": "h100-demo-slow.jsonl"}


def test_prometheus_scrapes_two_simulated_nodes(tmp_path: Path) -> None:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(NO_BINARY)
    last = {host: read_recording(RECORDINGS / name)[-1] for host, name in NODES.items()}
    assert len({snapshot.gpus[0].utilization_gpu for snapshot in last.values()}) == 2, "recordings must differ"
    with ExitStack() as stack:
        exporters = {
            host: stack.enter_context(
                running_exporter("--replay", str(RECORDINGS / name), "--speed", "32", "--host-label", host)
            )
            for host, name in NODES.items()
        }
        base = stack.enter_context(running_prometheus(binary, tmp_path, [e.url for e in exporters.values()]))

        def replays_done() -> bool:  # each exporter holds its recording's last snapshot once its replay ended
            stamps = query_by_host(base, "gpumon_snapshot_timestamp_seconds")
            return all(stamps.get(host) == snapshot.timestamp for host, snapshot in last.items())

        wait_until(replays_done, STARTUP_TIMEOUT, "the recordings' last snapshots in Prometheus", interval=0.25)
        utilization = query_by_host(base, "gpumon_gpu_utilization_ratio")
        memory = query_by_host(base, "gpumon_gpu_memory_used_bytes")
        sm_active = query_by_host(base, 'avg by (host) (gpumon_gpu_sm_active_ratio{job="gpumon"})')
        assert set(utilization) == set(NODES)
        for host, snapshot in last.items():
            gpu = snapshot.gpus[0]
            assert gpu.utilization_gpu is not None and gpu.sm_activity is not None
            assert utilization[host] == pytest.approx(gpu.utilization_gpu / 100)
            assert memory[host] == gpu.memory_used
            assert sm_active[host] == pytest.approx(gpu.sm_activity / 100)
        commands = api(base, "/api/v1/label/command/values")
        assert "python3 training_load.py" in commands
        assert not any("--duration" in command for command in commands)
