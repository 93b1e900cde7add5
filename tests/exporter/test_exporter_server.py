"""The /metrics server: a real exporter process, basic auth, TLS (a real openssl certificate), silent clients that
block nobody, and one-line errors with exit 2 for bad input."""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from exporter_helpers import RECORDINGS, REPO, only, running_exporter, samples, scrape, wait_until
from prometheus_client.registry import CollectorRegistry

from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.labels import PlacementCache
from gpumon.exporter.server import (
    MetricsServer,
    ServerConfigError,
    TlsFiles,
    parse_listen,
    tls_context,
)
from gpumon.sampling.recording import read_recording


@pytest.fixture
def registry() -> CollectorRegistry:
    collector = SnapshotCollector("node-a", placements=PlacementCache(enabled=False))
    collector.on_snapshot(read_recording(RECORDINGS / "h100-demo-slow.jsonl")[-1])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


@pytest.fixture
def server_factory(registry: CollectorRegistry) -> Iterator[object]:
    servers: list[MetricsServer] = []

    def make(**options: object) -> MetricsServer:
        server = MetricsServer(registry, "127.0.0.1:0", **options)  # type: ignore[arg-type]  # tls / basic_auth
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def wait_for_replay_end(url: str, last_timestamp: float) -> None:
    """Until the exporter at `url` serves its recording's last snapshot."""

    def replay_done() -> bool:
        stamp = samples(scrape(url)).get("gpumon_snapshot_timestamp_seconds")
        return stamp is not None and only(stamp)[1] == last_timestamp

    wait_until(replay_done, 30, "the replay's last snapshot exported")


def test_replayed_exporter_serves_the_recording_and_stops_on_sigterm() -> None:
    last = read_recording(RECORDINGS / "h100-demo-slow.jsonl")[-1]
    with running_exporter(
        "--replay", str(RECORDINGS / "h100-demo-slow.jsonl"), "--speed", "32", "--host-label", "sim-1"
    ) as exporter:
        assert exporter.url.startswith("http://127.0.0.1:")
        wait_for_replay_end(exporter.url, last.timestamp)
        found = samples(scrape(exporter.url))
        labels, value = only(found["gpumon_gpu_utilization_ratio"])
        assert labels["host"] == "sim-1"
        assert last.gpus[0].utilization_gpu is not None
        assert value == pytest.approx(last.gpus[0].utilization_gpu / 100)
        exporter.proc.send_signal(signal.SIGTERM)
        assert exporter.proc.wait(timeout=10) == 0


def test_basic_auth(server_factory: object, tmp_path: Path) -> None:
    assert callable(server_factory)
    server = server_factory(basic_auth=("prom", "s3cret"))
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(server.url)
    assert refused.value.code == 401 and "Basic" in refused.value.headers["WWW-Authenticate"]
    wrong = base64.b64encode(b"prom:guess").decode()
    with pytest.raises(urllib.error.HTTPError):
        scrape(server.url, headers={"Authorization": f"Basic {wrong}"})
    right = base64.b64encode(b"prom:s3cret").decode()
    assert "gpumon_gpu_utilization_ratio" in scrape(server.url, headers={"Authorization": f"Basic {right}"})


def _self_signed(tmp_path: Path) -> TlsFiles:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl binary to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return TlsFiles(str(cert), str(key))


def test_tls(server_factory: object, tmp_path: Path) -> None:
    assert callable(server_factory)
    files = _self_signed(tmp_path)
    server = server_factory(tls=files)
    assert server.url.startswith("https://")
    context = ssl.create_default_context(cafile=files.certfile)
    with urllib.request.urlopen(server.url, context=context, timeout=5) as response:
        assert b"gpumon_gpu_utilization_ratio" in response.read()
    with pytest.raises(OSError):  # plain HTTP gets no metrics (a reset or a bad status line)
        scrape(server.url.replace("https://", "http://"), timeout=3)
    with pytest.raises(ServerConfigError, match="cannot load the TLS"):
        tls_context(TlsFiles(str(tmp_path / "missing.pem"), files.keyfile))


@pytest.mark.parametrize("use_tls", [False, True])
def test_silent_clients_block_no_scrape(server_factory: object, tmp_path: Path, use_tls: bool) -> None:
    assert callable(server_factory)
    files = _self_signed(tmp_path) if use_tls else None
    server = server_factory(tls=files)
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
    try:
        time.sleep(0.2)
        for client in silent[:16]:
            client.close()
        started = time.monotonic()
        text = ""
        while not text:
            # The server frees a closed client's slot once it reads the EOF; a scrape that races it is closed at once,
            # and the next one (Prometheus's next, here a retry) gets through.
            try:
                if files is None:
                    text = scrape(server.url, timeout=5)
                else:
                    context = ssl.create_default_context(cafile=files.certfile)
                    with urllib.request.urlopen(server.url, context=context, timeout=5) as response:
                        text = response.read().decode()
            except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLError, urllib.error.URLError):
                assert time.monotonic() - started < 3.0, "the freed slots never took a scrape"
                time.sleep(0.05)
        assert "gpumon_gpu_utilization_ratio" in text
        assert time.monotonic() - started < 3.0
    finally:
        for client in silent:
            client.close()


@pytest.mark.parametrize("use_tls", [False, True])
def test_idle_clients_holding_every_slot_block_no_scrape(server_factory: object, tmp_path: Path, use_tls: bool) -> None:
    """Twenty idle connections, all still open, once locked every scrape out (a 16-connection cap)."""
    assert callable(server_factory)
    files = _self_signed(tmp_path) if use_tls else None
    server = server_factory(tls=files)
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
    try:
        idle[-1].sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # slow headers: as idle as the silent ones
        started = time.monotonic()
        if files is None:
            text = scrape(server.url, timeout=5)
        else:
            context = ssl.create_default_context(cafile=files.certfile)
            with urllib.request.urlopen(server.url, context=context, timeout=5) as response:
                text = response.read().decode()
        assert "gpumon_gpu_utilization_ratio" in text
        assert time.monotonic() - started < 3.0
    finally:
        for client in idle:
            client.close()


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen("[::1]:0") == ("::1", 0)
    assert parse_listen(":9400") == ("0.0.0.0", 9400)
    for bad in ("9400", "host:", "host:port", "h:70000", ""):
        with pytest.raises(ServerConfigError):
            parse_listen(bad)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", "exporter", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    loose = tmp_path / "auth"
    loose.write_text("prom:pw\n")
    os.chmod(loose, 0o644)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened for reading, it would wait for a writer forever
    pem = tmp_path / "some.pem"
    pem.write_text("not a certificate\n")
    cases = {
        ("--listen", "nonsense"): "is not HOST:PORT",
        ("--listen", f"127.0.0.1:{busy.getsockname()[1]}"): "cannot listen on",
        ("--listen", "no.such.host.invalid:9400"): "cannot listen on",
        ("--tls-cert", "x.pem"): "--tls-cert and --tls-key go together",
        ("--tls-client-ca", "ca.pem"): "needs --tls-cert",
        ("--tls-cert", str(tmp_path / "no.pem"), "--tls-key", str(tmp_path / "no.pem")): "cannot load the TLS",
        ("--basic-auth-file", str(loose)): "chmod 600",
        ("--basic-auth-file", str(fifo)): "not a regular file",
        ("--tls-cert", str(fifo), "--tls-key", str(pem)): "not a regular file",
        ("--tls-cert", str(pem), "--tls-key", str(fifo)): "not a regular file",
        ("--tls-cert", str(pem), "--tls-key", str(pem), "--tls-client-ca", str(fifo)): "not a regular file",
        ("--tls-cert", "/dev/zero", "--tls-key", str(pem)): "not a regular file",
        ("--basic-auth-file", str(tmp_path / "none")): "cannot read the basic auth file",
        ("--replay", str(tmp_path / "none.jsonl")): "No such file",
        ("--replay", str(garbage)): "garbage.jsonl",
        ("--interval", "0"): "--interval",
        ("--host-label", " "): "must not be empty",
    }
    try:
        for args, message in cases.items():
            result = _cli("--listen", "127.0.0.1:0", "--no-jobs", *args)
            assert result.returncode == 2, (args, result.stderr)
            assert message in result.stderr, (args, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
            assert "Traceback" not in result.stderr
    finally:
        busy.close()


@pytest.mark.parametrize(
    ("flags", "env"),
    [(("--only", "1"), {}), (("--only-visible",), {"CUDA_VISIBLE_DEVICES": "1"})],
    ids=["only", "only-visible"],
)
def test_one_gpu_of_two_exported(flags: tuple[str, ...], env: dict[str, str]) -> None:
    """As dcgm-exporter's --devices: one exporter per simulated node of a 2-GPU machine serves only its own GPU,
    and the processes on it."""
    recording = RECORDINGS / "h200x2-tests.jsonl"
    last = read_recording(recording)[-1]
    assert {gpu.index for gpu in last.gpus} == {0, 1}
    assert [process.gpu_indices for process in last.processes] == [(0,)]
    with running_exporter("--replay", str(recording), "--speed", "64", *flags, env=env) as exporter:
        wait_for_replay_end(exporter.url, last.timestamp)
        found = samples(scrape(exporter.url))
    labels, _ = only(found["gpumon_gpu_utilization_ratio"])
    assert labels["gpu"] == "1"
    assert "gpumon_process_gpu_memory_bytes" not in found  # its one process is on GPU 0
