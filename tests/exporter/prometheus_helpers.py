"""A real Prometheus (the Debian `prometheus` binary) on 127.0.0.1 scraping given targets every second, for tests."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from exporter_helpers import wait_until

from tests.prometheus_server import (
    NO_BINARY,
    STARTUP_TIMEOUT,
    exited,
    free_port,
    launched_prometheus,
    prometheus_binary,
)

__all__ = [
    "NO_BINARY",
    "STARTUP_TIMEOUT",
    "api",
    "free_port",
    "prometheus_binary",
    "query_by_host",
    "running_prometheus",
]

QUERY_TIMEOUT = 5.0


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
    config = (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: gpumon\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    with launched_prometheus(tmp_path, config, ["--storage.tsdb.retention.time=1h"], binary) as (server, port):
        base = f"http://127.0.0.1:{port}"

        def all_up() -> bool:
            exited(server, tmp_path)
            try:
                active = api(base, "/api/v1/targets")["activeTargets"]
            except OSError:
                return False
            return len(active) == len(targets) and all(target["health"] == "up" for target in active)

        wait_until(all_up, STARTUP_TIMEOUT, "every exporter up in Prometheus", interval=0.25)
        yield base
