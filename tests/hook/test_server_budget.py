"""No client can slow the job: floods of requests keep the hook's server thread within its CPU budget."""

from __future__ import annotations

import gc
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpumon import protocol
from gpumon.hook import server as server_module
from gpumon.hook import server_client as client_module
from gpumon.hook.runtime import HookRuntime
from gpumon.hook.server import HookServer
from gpumon.jobs.connection import HookConnection

FLOOD_S = 2.0
CPU_SLACK_S = 0.03
"""Beyond the budget, the one unit of work that may start just before the budget runs out (and clock granularity)."""


@pytest.fixture
def server(sock_dir: str, backlog_runtime: HookRuntime) -> Iterator[HookServer]:
    server = HookServer(backlog_runtime, directory=sock_dir)
    assert server.start(), server.failure
    yield server
    server.stop()


def server_cpu_s(server: HookServer) -> float:
    """CPU seconds the server's thread has used, read from outside it."""
    thread = server._thread
    assert thread is not None and thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


class Flooder(threading.Thread):
    """One client that sends `line` as fast as the hook takes it for `seconds`, and reads (and keeps) every reply."""

    def __init__(self, path: str, line: bytes, seconds: float) -> None:
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.sock.setblocking(False)
        self.payload = line * max(1, 65536 // len(line))
        self.seconds = seconds
        self.received = bytearray()
        self.sent_lines = 0

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        pending = memoryview(self.payload)
        while time.monotonic() < deadline:
            try:
                sent = self.sock.send(pending)
                pending = pending[sent:] if sent < len(pending) else memoryview(self.payload)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                break
            self._drain()
            time.sleep(0.001)
        self._drain()
        self.sock.close()

    def _drain(self) -> None:
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if not chunk:
                return
            self.received += chunk

    def replies(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in bytes(self.received).splitlines() if line.strip()]


def flood(server: HookServer, lines: list[bytes]) -> tuple[float, list[Flooder]]:
    """Run one flooder per line at once; the CPU the server's thread used meanwhile, and the flooders."""
    flooders = [Flooder(server.path, line, FLOOD_S) for line in lines]
    # A full collection of this big test process (tens of ms) runs on whichever thread's allocation triggers it:
    # not the server's own work, so none runs meanwhile.
    gc.disable()
    try:
        cpu_before, started = server_cpu_s(server), time.monotonic()
        for flooder in flooders:
            flooder.start()
        for flooder in flooders:
            flooder.join(FLOOD_S + 10)
        used, elapsed = server_cpu_s(server) - cpu_before, time.monotonic() - started
    finally:
        gc.enable()
    assert used <= server_module.SERVER_CPU_SHARE * elapsed + server_module.SERVER_CPU_BURST + CPU_SLACK_S, (
        f"the server's thread used {used:.3f} s of CPU in {elapsed:.2f} s"
    )
    return used, flooders


def request_line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def test_a_resubscribe_flood_replays_the_backlog_once_per_budget(server: HookServer) -> None:
    line = request_line({"type": "subscribe", "id": 1, "backlog": protocol.BACKLOG_MAX})
    _used, [flooder] = flood(server, [line])
    replies = flooder.replies()
    records = sum(len(msg["records"]) for msg in replies if msg["type"] == protocol.STEPS)
    replays = client_module.REPLAY_BURST + client_module.REPLAY_RATE * (FLOOD_S + 1)
    assert records <= server_module.DEFAULT_BACKLOG + replays
    assert any(msg["type"] == protocol.SUBSCRIBED for msg in replies)
    refused = [msg for msg in replies if msg["type"] == protocol.ERROR]
    assert refused and refused[0]["code"] == protocol.E_OVER_BUDGET and refused[0]["id"] == 1


def test_eight_get_state_flooders_stay_within_the_servers_budget(server: HookServer) -> None:
    line = request_line({"type": "get_state", "id": 7})
    _used, flooders = flood(server, [line] * server_module.MAX_CLIENTS)
    answered = [msg for f in flooders for msg in f.replies() if msg["type"] == protocol.STATE and msg.get("id") == 7]
    assert answered, "flooders are slowed down, not refused"


@pytest.mark.parametrize("shape", ["string", "list"])
def test_huge_request_ids_are_refused_and_never_echoed(server: HookServer, shape: str) -> None:
    size = 60_000
    huge_id: Any = "x" * size if shape == "string" else [[1]] * (size // 4)
    line = request_line({"type": "get_state", "id": huge_id})
    assert len(line) <= protocol.MAX_LINE
    _used, flooders = flood(server, [line] * server_module.MAX_CLIENTS)
    errors = [msg for flooder in flooders for msg in flooder.replies() if msg["type"] == protocol.ERROR]
    assert errors and all(msg["code"] == protocol.E_BAD_MESSAGE and "id" not in msg for msg in errors[:1])
    assert all(len(json.dumps(msg.get("id"))) <= server_module.MAX_ID_BYTES for msg in errors)


@pytest.mark.parametrize("request_id", [b"NaN", b"Infinity", b"-Infinity", b"[1,NaN]", b'{"a":Infinity}'])
def test_a_nan_or_infinite_id_gets_an_error(server: HookServer, request_id: bytes) -> None:
    with HookConnection(server.path) as conn:
        conn.sock.sendall(b'{"type":"ping","id":' + request_id + b"}\n")
        deadline = time.monotonic() + 5
        reply = None
        while time.monotonic() < deadline and (reply is None or reply["type"] != protocol.ERROR):
            reply = conn.recv(1)
        assert reply is not None and reply["type"] == protocol.ERROR, reply
        assert reply["code"] == protocol.E_BAD_MESSAGE and "id" not in reply
        assert conn.request({"type": "ping", "id": 2}, (protocol.PONG,))["id"] == 2


def test_a_nan_id_flood_stays_within_the_servers_budget(server: HookServer) -> None:
    _used, flooders = flood(server, [b'{"type":"get_state","id":NaN}\n'] * server_module.MAX_CLIENTS)
    assert any(msg["type"] == protocol.ERROR for flooder in flooders for msg in flooder.replies())
