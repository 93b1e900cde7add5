"""The exporter under hostile input, over real sockets and real TLS: idle and slow TLS clients reopened as they drop,
one address holding many connections, oversized request heads (a scrape answers through all of them), and a
recording of 15,000 processes a snapshot."""

from __future__ import annotations

import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from exporter_helpers import RECORDINGS, running_exporter, samples, scrape, wait_until
from hostile_clients import HostileClients
from prometheus_client.registry import CollectorRegistry
from test_exporter_server import _self_signed

from gpumon.exporter import intake
from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.labels import PlacementCache
from gpumon.exporter.server import MetricsServer, TlsFiles
from gpumon.sampling.processes import MAX_PROCESSES
from gpumon.sampling.recording import RecordingWriter, read_recording
from gpumon.sampling.snapshot import ProcessSample, Snapshot

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # the intake's own
SCRAPE_DEADLINE = 5.0
"""Seconds a scrape may take (Prometheus's default scrape timeout is 10 s)."""


@pytest.fixture
def registry() -> CollectorRegistry:
    collector = SnapshotCollector("node-a", placements=PlacementCache(enabled=False))
    collector.on_snapshot(read_recording(RECORDINGS / "h100-demo-slow.jsonl")[-1])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    return _self_signed(tmp_path)


@pytest.fixture
def tls_server(registry: CollectorRegistry, tls_files: TlsFiles) -> Iterator[MetricsServer]:
    server = MetricsServer(registry, "127.0.0.1:0", tls=tls_files)
    server.start()
    yield server
    server.close()


def tls_scrape(server: MetricsServer, files: TlsFiles, source: str = "127.0.0.1") -> float:
    """Seconds one HTTPS scrape from `source` took to answer with the metrics (it must, within SCRAPE_DEADLINE)."""
    context = ssl.create_default_context(cafile=files.certfile)
    started = time.monotonic()
    with (
        socket.create_connection(("127.0.0.1", server.port), SCRAPE_DEADLINE, source_address=(source, 0)) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.0 200"), answer[:100]
    assert b"gpumon_gpu_utilization_ratio" in answer
    assert took < SCRAPE_DEADLINE
    return took


def test_idle_and_slow_tls_clients_reopened_as_they_drop_starve_no_scrape(
    tls_server: MetricsServer, tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """33 idle TLS connections reopened as they dropped made every scrape fail for 30 s; 100 idle and slow ones,
    from the scraper's own address, now leave every scrape answering, through the handshake timeouts' drops."""
    monkeypatch.setattr(intake, "HANDSHAKE_TIMEOUT", 1.0)  # the drops and reopens happen within the test
    with HostileClients(tls_server.port, silent=50, slow=50) as pests:
        wait_until(lambda: pests.reopened >= 100, 10, "the server dropping the idle clients at the handshake timeout")
        for _ in range(5):
            tls_scrape(tls_server, tls_files)
        assert pests.open_count() >= 90  # they were there all along


@pytest.mark.parametrize("cap", ["MAX_PER_PEER", "MAX_PENDING"])
def test_one_address_holds_at_most_its_share(
    tls_server: MetricsServer, tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch, cap: str
) -> None:
    """One address opening 40 slow connections keeps 8 of them (its cap, or every address's cap that it alone
    fills); a scrape from another address is answered."""
    monkeypatch.setattr(intake, cap, 8)
    with HostileClients(tls_server.port, silent=20, slow=20, source="127.0.0.2") as pests:
        wait_until(lambda: pests.reopened >= 40, 10, "newcomers taking the places of the address's oldest")
        tls_scrape(tls_server, tls_files)


def test_silent_tls_client_dropped_at_the_handshake_timeout(
    tls_server: MetricsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(intake, "HANDSHAKE_TIMEOUT", 0.5)
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as silent:
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed by the server, not by our own timeout (which would raise)
        assert 0.3 < time.monotonic() - started < 4


def _send_head(port: int, head: bytes) -> bytes:
    """What the server answers to `head` (b'' when it closes without an answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(head)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before it was all in: the server stopped reading
        try:
            return sock.recv(200)
        except ConnectionResetError:
            return b""


@pytest.mark.parametrize(
    "head",
    [
        b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (n, b"a" * 54_500) for n in range(99)) + b"\r\n",
        b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: a\r\n" % n for n in range(80)) + b"\r\n",
        b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 60_000 + b"\r\n\r\n",
    ],
    ids=["5.4MB-of-headers", "80-headers", "one-60KB-header"],
)
def test_oversized_request_heads_refused(registry: CollectorRegistry, head: bytes) -> None:
    server = MetricsServer(registry, "127.0.0.1:0")
    server.start()
    try:
        answer = _send_head(server.port, head)
        assert answer == b"" or answer.startswith(b"HTTP/1.0 431"), answer
        ordinary = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
        assert _send_head(server.port, ordinary).startswith(b"HTTP/1.0 200")
    finally:
        server.close()


def _send_if_open(sock: socket.socket, data: bytes) -> None:
    """Sends unless the server closed it (one address's 260 connections are over its cap: the oldest go)."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def test_plain_idle_slowloris_and_partial_clients_starve_no_scrape(registry: CollectorRegistry) -> None:
    """Plain HTTP with 30 idle, 30 slowloris (a header line every 0.2 s) and 200 partial requests."""
    server = MetricsServer(registry, "127.0.0.1:0")
    server.start()
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(30)]
    partial = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(200)]
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(30)]
    try:
        for sock in partial:
            _send_if_open(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        for line in range(5):
            for sock in slow:
                _send_if_open(sock, b"X-%d: y\r\n" % line)
            started = time.monotonic()
            with urllib.request.urlopen(server.url, timeout=SCRAPE_DEADLINE) as response:
                assert b"gpumon_gpu_utilization_ratio" in response.read()
            assert time.monotonic() - started < SCRAPE_DEADLINE
    finally:
        for sock in idle + partial + slow:
            sock.close()
        server.close()


def test_a_replayed_flood_of_processes_exports_at_most_the_cap(tmp_path: Path) -> None:
    """15,000 processes a snapshot made 105,000 exporter series; the exporter now serves the heaviest
    MAX_PROCESSES."""
    path = tmp_path / "flood.jsonl"
    flood = tuple(ProcessSample(pid=pid, gpu_indices=(0,), gpu_memory=pid << 20) for pid in range(1, 15_001))
    with open(path, "w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream)
        for tick in range(2):
            writer.write(Snapshot(timestamp=1_795_000_000.0 + tick, processes=flood))
    with running_exporter("--replay", str(path), "--speed", "64", "--no-jobs") as exporter:
        wait_until(lambda: "gpumon_process_gpu_memory_bytes{" in scrape(exporter.url), 30, "the processes exported")
        found = samples(scrape(exporter.url))
    pids = {int(labels["pid"]) for labels, _ in found["gpumon_process_gpu_memory_bytes"]}
    assert len(pids) == MAX_PROCESSES
    assert max(pids) == 15_000 and min(pids) == 15_000 - MAX_PROCESSES + 1
