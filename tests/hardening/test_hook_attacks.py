"""Attacks on a real hooked CPU job's socket: a connection flood, deeply nested JSON, wrongly typed fields, and a
server loop that fails. The job must keep its pace and the hook must keep answering.

The flood bounds asserted here hold on a busy 2-core CI, where the job's own pace swings widely from second to
second with the other tests beside it. During a flood of 1,000 connections/s, alternating with quiet windows:
- the job's threads other than the training thread (the hook's server) use at most HOOK_CPU_SHARE of a core more
  than in the quiet windows; this is the robust one: CPU time spent hardly depends on what else runs;
- the median, over the flood windows, of the job's steps/s relative to the mean of the two quiet windows around it
  is at least FLOOD_KEEPS.
Before the server rate-limited accepts, such a flood took a job from ~650 to 18-34 steps/s (under 6%), and the
server thread used most of a core. benchmarks/hook_flood.py measures the strict figure (at most 2% lost).
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpumon import protocol
from gpumon.hook.server_client import INPUT_BURST
from gpumon.jobs.connection import HookConnection
from tests.hook.hook_helpers import Job

ACCEPT_BURST, ACCEPT_RATE = 20, 10.0
"""gpumon.hook.server's budget for greeted connections (not imported: importing gpumon.hook hooks this process)."""
FLOOD_RATE = 1000.0
WINDOW_S = 1.5
SETTLE_S = 0.4
"""The start of each window that is not counted (the flood starting or stopping)."""
ROUNDS = 4
REPLY_WAIT_S = 15.0
"""How long a client here waits for an answer. The test job steps thousands of times a second, so each client's
default streams cost the server milliseconds; with every connection greeted and streamed, the server's budget (1.5%
of a core) serves two or three connections a second and, in debt, waits up to (burst + resume) / share = 1.7 s.
A loaded machine stretches each of those: the attack waits, as an attacker would."""
FLOOD_KEEPS = 0.5
HOOK_CPU_SHARE = 0.05

FLOODER = r"""
import socket, sys, time
path, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
start, sent = time.monotonic(), 0
while time.monotonic() - start < seconds:
    due = int((time.monotonic() - start) * rate)
    while sent < due:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError:
            pass
        sock.close()
        sent += 1
    time.sleep(0.002)
print(sent)
"""


@pytest.fixture
def start_job() -> Iterator[Any]:
    base = tempfile.mkdtemp(prefix="gpumon-test-", dir="/tmp")
    jobs: list[Job] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Job:
        job = Job(list(args), os.path.join(base, "s"), env=env)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()
    shutil.rmtree(base, ignore_errors=True)


def connect(path: str, timeout: float = 10.0) -> HookConnection:
    """A connection to the hook, retried: a connect refused by the rate limit is closed before the hello."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return HookConnection(path)
        except (OSError, EOFError, protocol.ProtocolError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def thread_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def side_threads_cpu_s(pid: int) -> float:
    """CPU seconds used so far by the job's threads other than the training (main) thread: the hook's server."""
    ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) == pid:
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stream:
                fields = stream.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


class StepClock:
    """The job's step count over time, from its hook's `steps` stream on a thread: each message's `last_seq` (every
    step up to it was sent or, past the client's budget, counted as dropped) at the time it came."""

    def __init__(self, conn: HookConnection) -> None:
        self.conn = conn
        self.marks: list[tuple[float, int]] = []
        self._stop = threading.Event()
        conn.send({"type": protocol.SUBSCRIBE, "steps_interval": 0.5, "state": False})
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._stop.is_set():
            msg = self.conn.recv(0.5)
            if msg is not None and msg["type"] == protocol.STEPS and msg.get("last_seq"):
                self.marks.append((time.time(), int(msg["last_seq"])))

    def rate(self, start: float, end: float) -> float:
        """Steps a second over the shortest span of messages that covers [start, end]: under a flood the server's
        budget may hold a message back, and the next one's last_seq still counts every step."""
        marks = list(self.marks)
        before = [mark for mark in marks if mark[0] <= start] or [mark for mark in marks if mark[0] > start][:1]
        after = [mark for mark in marks if mark[0] >= end][:1] or [mark for mark in marks if mark[0] < end][-1:]
        if not before or not after or after[0][0] <= before[-1][0]:
            return 0.0
        (t0, seq0), (t1, seq1) = before[-1], after[0]
        return (seq1 - seq0) / (t1 - t0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def test_a_connection_flood_barely_slows_the_job_and_the_hook_still_answers(start_job: Any) -> None:
    # The server's cost is measured from the job's side threads' CPU: the stack sampler (its own cost measured by
    # benchmarks/sampler_cost.py) stays off, so its samples do not blur the difference between the windows.
    job = start_job(
        "--mode",
        "optimizer",
        "--item-sleep-ms",
        "0",
        "--steps",
        "500",
        "--seconds",
        "120",
        env={**os.environ, "GPUMON_HOOK_SAMPLE_HZ": "0"},
    )
    path = job.wait_socket()
    conn = connect(path)
    threads_before = thread_count(job.pid)  # after the greeting: the socket is bound before its thread starts
    clock = StepClock(conn)
    time.sleep(1.0)  # steady state
    rates: list[float] = []
    side_cpu_s = [0.0, 0.0]  # quiet, flooded
    attempts = 0
    for window in range(2 * ROUNDS + 1):
        flooder = None
        if window % 2:
            flooder = subprocess.Popen(
                [sys.executable, "-c", FLOODER, path, str(FLOOD_RATE), str(WINDOW_S)], stdout=subprocess.PIPE, text=True
            )
        start, cpu_before = time.time(), side_threads_cpu_s(job.pid)
        time.sleep(WINDOW_S)
        if flooder is not None:
            attempts += int(flooder.communicate(timeout=10)[0])
        side_cpu_s[window % 2] += side_threads_cpu_s(job.pid) - cpu_before
        time.sleep(0.6)  # the records of the window's last steps
        rates.append(clock.rate(start + SETTLE_S, start + WINDOW_S))
    clock.stop()
    quiet, flooded = rates[0::2], rates[1::2]
    keeps = [rate / statistics.mean(rates[i * 2 : i * 2 + 3 : 2]) for i, rate in enumerate(flooded)]
    flood_cpu_share = (side_cpu_s[1] / ROUNDS - side_cpu_s[0] / (ROUNDS + 1)) / WINDOW_S
    report = (
        f"steps/s quiet {quiet}, during the flood {flooded}; hook thread CPU s quiet {side_cpu_s[0]:.3f}, "
        f"flooded {side_cpu_s[1]:.3f}: the flood costs {flood_cpu_share:.1%} of a core"
    )
    assert attempts >= 0.8 * FLOOD_RATE * WINDOW_S * ROUNDS, f"the flood fell short: {attempts} connects"
    assert min(quiet) > 20, report
    assert flood_cpu_share <= HOOK_CPU_SHARE, report
    assert statistics.median(keeps) >= FLOOD_KEEPS, report
    assert conn.request({"type": protocol.PING, "id": "after"}, (protocol.PONG,), REPLY_WAIT_S)["id"] == "after"
    conn.close()
    # A new client right after a flood may meet the accept budget the flood's last connections spent (closed unread,
    # listening paused up to a second) or a server still paying its debt: it connects again, as `attach` does. The
    # server lets go of closed connections on its next pass, which a loaded machine may delay a little.
    deadline = time.monotonic() + 20
    state: dict[str, Any] | None = None
    while state is None or state["hook"]["clients"] != 1:
        assert time.monotonic() < deadline, f"no answer with one client within 20 s after the flood: {state}"
        try:
            with connect(path) as again:
                state = again.request({"type": protocol.GET_STATE, "id": 1}, (protocol.STATE,), REPLY_WAIT_S)
                while state["hook"]["clients"] != 1 and time.monotonic() < deadline:
                    time.sleep(0.2)
                    state = again.request({"type": protocol.GET_STATE, "id": 1}, (protocol.STATE,), REPLY_WAIT_S)
        except (TimeoutError, OSError, EOFError, protocol.ProtocolError):
            time.sleep(0.5)
    assert state["hook"]["server_restarts"] == 0, state["hook"]
    assert thread_count(job.pid) == threads_before


def test_deeply_nested_lines_never_end_the_server(start_job: Any) -> None:
    job = start_job("--mode", "optimizer", "--item-sleep-ms", "0", "--steps", "50", "--seconds", "60")
    path = job.wait_socket()
    with connect(path):
        threads_before = thread_count(job.pid)
    deep = b"[" * 60_000 + b"\n"
    sent = 0
    # The tester's attack, 51 lines. Two a connection: 120 KB fit a new client's input burst (INPUT_BURST), so the
    # sends never wait on the budget; more would wait seconds for it (16 KB/s), as the budget intends, past the
    # connection's 5 s timeout on a loaded machine.
    assert 2 * len(deep) <= INPUT_BURST
    while sent < 51:
        with connect(path) as conn:
            conn.sock.settimeout(REPLY_WAIT_S)
            for _ in range(2):
                conn.sock.sendall(deep)
                sent += 1
            reply = conn.recv(REPLY_WAIT_S)
            while reply is not None and reply["type"] != protocol.ERROR:
                reply = conn.recv(REPLY_WAIT_S)
            # Refused before parsing: more brackets than a request may hold (parsing them would cost a collection).
            assert reply is not None and reply["code"] == protocol.E_BAD_MESSAGE, reply
            assert "arrays and objects" in reply["message"]
    nested_in_a_field = b'{"type":"ping","id":7,"x":' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}\n"
    with connect(path) as conn:
        conn.sock.sendall(nested_in_a_field)
        reply = conn.recv(REPLY_WAIT_S)
        while reply is not None and reply["type"] != protocol.ERROR:
            reply = conn.recv(REPLY_WAIT_S)
        assert reply is not None and reply["code"] == protocol.E_BAD_MESSAGE and "id" not in reply  # never parsed
        assert conn.request({"type": protocol.PING, "id": "still"}, (protocol.PONG,), REPLY_WAIT_S)["id"] == "still"
        state = conn.request({"type": protocol.GET_STATE, "id": 1}, (protocol.STATE,), REPLY_WAIT_S)
        assert state["hook"]["server_restarts"] == 0
    assert os.path.exists(path) and job.proc.poll() is None
    assert thread_count(job.pid) == threads_before


def test_an_error_for_a_wrongly_typed_field_keeps_the_request_id(start_job: Any) -> None:
    job = start_job("--mode", "optimizer", "--steps", "20")
    with connect(job.wait_socket()) as conn:
        for request in (
            {"type": protocol.DIAGNOSE, "id": "d1", "steps": "10"},
            {"type": protocol.SUBSCRIBE, "id": {"n": 2}, "steps_interval": "fast"},
            {"type": protocol.SET_KNOB, "id": 3, "knobs": [1]},
            {"type": protocol.DIAGNOSE, "id": 4},
        ):
            reply = conn.request(request, ("never",))
            assert reply["type"] == protocol.ERROR and reply["code"] == protocol.E_BAD_MESSAGE, reply
            assert reply["id"] == request["id"]


def test_a_failing_server_loop_is_restarted_and_reported(start_job: Any) -> None:
    job = start_job(
        "--mode", "optimizer", "--item-sleep-ms", "0", "--steps", "50", "--seconds", "60", "--break-server", "3"
    )
    path = job.wait_socket()
    job.event("ready")
    threads_before = thread_count(job.pid)
    with connect(path) as conn:  # this connection's arrival makes the loop turn, and fail three times
        state = conn.request({"type": protocol.GET_STATE, "id": 1}, (protocol.STATE,), timeout=10)
        assert state["hook"]["server_restarts"] == 3
        assert state["hook"]["errors"] >= 3 and "injected failure" in state["hook"]["last_error"]
        assert conn.request({"type": protocol.PING, "id": 2}, (protocol.PONG,))["id"] == 2
    with connect(path) as again:
        assert again.hello["pid"] == job.pid
    assert thread_count(job.pid) == threads_before and os.path.exists(path)


def test_connects_beyond_the_budget_are_closed_before_the_hello(start_job: Any) -> None:
    """A connection over the rate gets nothing: no hello, no pid, no argv (or the kernel refuses it outright)."""
    job = start_job("--mode", "optimizer", "--steps", "20", "--seconds", "30")
    path = job.wait_socket()
    start = time.monotonic()
    opened: list[socket.socket] = []
    refused = 0
    for _ in range(60):  # 200/s, far over the budget
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
            opened.append(sock)
        except OSError:  # the listen backlog is full: the hook is not accepting
            refused += 1
            sock.close()
        time.sleep(0.005)
    hellos = silent = 0
    for sock in opened:
        sock.settimeout(5)
        received = b""
        try:
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:
            pass
        finally:
            sock.close()
        hellos += b'"type":"hello"' in received
        silent += not received
    most = ACCEPT_BURST + ACCEPT_RATE * (time.monotonic() - start)
    assert 1 <= hellos <= most, (hellos, most)
    assert silent + refused >= 60 - most, (silent, refused)
