"""A real Prometheus (the Debian `prometheus` binary) scrapes two simulated nodes: two exporters on 127.0.0.1,
each replaying a different real recording under its own host label; its HTTP API then answers with their values."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import RECORDINGS, running_exporter, wait_until

from gpumon.sampling.recording import read_recording

NODES = {"sim-node-a": "h100-training.jsonl", "sim-node-b": "h100-demo-slow.jsonl"}
STARTUP_TIMEOUT = 30.0
QUERY_TIMEOUT = 5.0


def prometheus_binary() -> str | None:
    found = shutil.which("prometheus")
    if found is None and os.access("/usr/bin/prometheus", os.X_OK):
        found = "/usr/bin/prometheus"
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]


def query_by_host(base: str, promql: str) -> dict[str, float]:
    return {
        item["metric"]["host"]: float(item["value"][1]) for item in api(base, "/api/v1/query", query=promql)["result"]
    }


def test_prometheus_scrapes_two_simulated_nodes(tmp_path: Path) -> None:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("no prometheus binary (the Debian package `prometheus`; .ci/run installs it where it can)")
    last = {host: read_recording(RECORDINGS / name)[-1] for host, name in NODES.items()}
    assert len({snapshot.gpus[0].utilization_gpu for snapshot in last.values()}) == 2, "recordings must differ"
    with ExitStack() as stack:
        exporters = {
            host: stack.enter_context(
                running_exporter("--replay", str(RECORDINGS / name), "--speed", "32", "--host-label", host)
            )
            for host, name in NODES.items()
        }
        targets = [urllib.parse.urlsplit(exporter.url).netloc for exporter in exporters.values()]
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: gpumon\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("w")
        stack.callback(log.close)
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        stack.callback(_stop, server)
        base = f"http://127.0.0.1:{port}"

        def both_up() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
            try:
                active = api(base, "/api/v1/targets")["activeTargets"]
            except OSError:
                return False
            return len(active) == 2 and all(target["health"] == "up" for target in active)

        wait_until(both_up, STARTUP_TIMEOUT, "both exporters up in Prometheus", interval=0.25)

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


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
