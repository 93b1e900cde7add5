"""A real Prometheus (the Debian `prometheus` binary) scraping given loopback targets every second, for the fleet."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpumon.fleet import PromClient, PromError
from tests.prometheus_server import NO_BINARY, STARTUP_TIMEOUT, exited, launched_prometheus, prometheus_binary
from tests.waiting import wait_until

__all__ = ["NO_BINARY", "has_prometheus", "scraping_prometheus"]


def has_prometheus() -> bool:
    return prometheus_binary() is not None


@contextmanager
def scraping_prometheus(tmp_path: Path, targets: Sequence[str], interval: str = "1s") -> Iterator[str]:
    """Prometheus scraping `targets` (job "gpumon"); yields its base URL once every target has been scraped up."""
    config = (
        f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n"
        f"scrape_configs:\n  - job_name: gpumon\n    static_configs:\n      - targets: {json.dumps(list(targets))}\n"
    )
    with launched_prometheus(tmp_path, config) as (server, port):
        base = f"http://127.0.0.1:{port}"
        client = PromClient(base, timeout=2.0)

        def all_up() -> bool:
            exited(server, tmp_path)
            try:
                return sum(sample.value for sample in client.query('up{job="gpumon"}')) == len(targets)
            except PromError:
                return False

        wait_until(all_up, STARTUP_TIMEOUT, "every target scraped up", interval=0.2)
        yield base
