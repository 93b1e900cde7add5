"""A real Prometheus process for tests and benchmarks: the one launcher (free loopback port, log file, stop ladder)
behind the exporter's and the fleet's Prometheus helpers."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

NO_BINARY = "no prometheus binary (the Debian package `prometheus`; .ci/run installs it where it can)"
STARTUP_TIMEOUT = 30.0


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


@contextmanager
def launched_prometheus(
    tmp_path: Path, config: str, extra_args: Sequence[str] = (), binary: str | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """Prometheus with `config` (the text of its prometheus.yml) on a free loopback port, its output in
    tmp_path/prometheus.log; yields (process, port) without waiting for it, and stops it (TERM, then KILL) after."""
    (tmp_path / "prometheus.yml").write_text(config)
    port = free_port()
    with (tmp_path / "prometheus.log").open("w") as log:
        server = subprocess.Popen(
            [
                binary or prometheus_binary() or "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
        try:
            yield server, port
        finally:
            stop(server)


def exited(server: subprocess.Popen[bytes], tmp_path: Path) -> None:
    """Raise, with the end of its log, when the launched Prometheus has exited."""
    if server.poll() is not None:
        raise AssertionError(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
