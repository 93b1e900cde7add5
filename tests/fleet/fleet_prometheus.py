"""A real Prometheus (the Debian `prometheus` binary) scraping given loopback targets every second, for the fleet."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpumon.fleet import PromClient, PromError

STARTUP_TIMEOUT = 30.0
NO_BINARY = "no prometheus binary (the Debian package `prometheus`; .ci/run installs it where it can)"


def has_prometheus() -> bool:
    return shutil.which("prometheus") is not None


@contextmanager
def scraping_prometheus(tmp_path: Path, targets: Sequence[str], interval: str = "1s") -> Iterator[str]:
    """Prometheus scraping `targets` (job "gpumon"); yields its base URL once every target has been scraped up."""
    (tmp_path / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n"
        f"scrape_configs:\n  - job_name: gpumon\n    static_configs:\n      - targets: {json.dumps(list(targets))}\n"
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    base = f"http://127.0.0.1:{port}"
    client = PromClient(base, timeout=2.0)

    def all_up() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")
        try:
            return sum(sample.value for sample in client.query('up{job="gpumon"}')) == len(targets)
        except PromError:
            return False

    try:
        wait_for(all_up, STARTUP_TIMEOUT, "every target scraped up")
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)
