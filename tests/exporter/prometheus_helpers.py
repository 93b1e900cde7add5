"""A real Prometheus (the Debian `prometheus` binary) on 127.0.0.1 scraping given targets every second, for tests."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from exporter_helpers import wait_until

STARTUP_TIMEOUT = 30.0
QUERY_TIMEOUT = 5.0
NO_BINARY = "no prometheus binary (the Debian package `prometheus`; .ci/run installs it where it can)"


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


@contextmanager
def running_prometheus(binary: str, tmp_path: Path, exporter_urls: Sequence[str]) -> Iterator[str]:
    """Prometheus scraping `exporter_urls` (job "gpumon") every second; yields its base URL once every target is up."""
    targets = [urllib.parse.urlsplit(url).netloc for url in exporter_urls]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: gpumon\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    port = free_port()
    with ExitStack() as stack:
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

        def all_up() -> bool:
            if server.poll() is not None:
                raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
            try:
                active = api(base, "/api/v1/targets")["activeTargets"]
            except OSError:
                return False
            return len(active) == len(targets) and all(target["health"] == "up" for target in active)

        wait_until(all_up, STARTUP_TIMEOUT, "every exporter up in Prometheus", interval=0.25)
        yield base


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
