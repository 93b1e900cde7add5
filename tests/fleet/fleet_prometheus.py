"""A real Prometheus (the Debian `prometheus` binary) scraping given loopback targets every second, for the fleet."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpumon.fleet import PromClient, PromError
from tests.prometheus_server import NO_BINARY, STARTUP_TIMEOUT, exited, launched_prometheus, prometheus_binary

__all__ = ["NO_BINARY", "has_prometheus", "scraping_prometheus", "wait_for"]


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

        wait_for(all_up, STARTUP_TIMEOUT, "every target scraped up")
        yield base


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)
