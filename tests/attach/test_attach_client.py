"""JobClient against real hooked CPU jobs (hello, steps, end, history, requests, latency) and against a misbehaving
fake hook (garbage, a line cut off by death, silence): it never hangs and keeps what it had."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from attach_helpers import wait_until

from gpumon import protocol
from gpumon.jobs.client import JobClient, JobRequestError
from gpumon.jobs.discovery import AttachError
from gpumon.jobs.jobstate import END_CLOSED


def test_client_receives_hello_and_steps_then_the_end_and_keeps_the_history(start_job: Any) -> None:
    job = start_job("--steps", "100", "--item-sleep-ms", "1")
    client = JobClient(job.pid, wait_for_socket=True)
    seen: list[str] = []
    client.start(seen.append)
    try:
        done = job.event("done")
        assert job.proc.wait(30) == 0
        assert client.wait_ended(10)
    finally:
        client.stop()
    view = client.view()
    assert view.info is not None and view.info.pid == job.pid
    assert view.ended and view.end_reason == "exit"  # the hook's bye
    assert seen[0] == protocol.HELLO and "steps" in seen and seen[-1] == "ended"
    assert view.last_seq == done["steps"] == 100
    assert [step.seq for step in view.steps] == list(range(1, 101))  # nothing lost, history kept after the end
    assert all(step.samples == 8 for step in view.steps)
    assert view.state is not None and view.dataloaders[0]["batch_size"] == 8
    assert view.step_source == protocol.SOURCE_OPTIMIZER
    # 8 items x 1 ms each per batch with no workers: most of each step waits for data.
    assert view.stats.breakdown.data is not None and view.stats.breakdown.data > 0.5
    assert view.stats.breakdown.gpu is None  # CPU torch: no GPU timing
    assert sum(point.steps for point in view.timeline) == 100


def test_a_killed_job_ends_the_client_with_its_history(start_job: Any) -> None:
    job = start_job("--seconds", "30")
    job.wait_socket()
    client = JobClient(job.pid)
    client.connect()
    client.start()
    try:
        assert wait_until(lambda: client.view().last_seq > 5, 20)
        os.killpg(job.pid, signal.SIGKILL)
        assert client.wait_ended(5)
    finally:
        client.stop()
    view = client.view()
    assert view.end_reason in ("the process exited", END_CLOSED)
    assert len(view.steps) >= 5 and view.info is not None


def test_requests_get_their_replies(watch_shared: Any) -> None:
    job = watch_shared
    client = JobClient(job.pid)
    client.connect()
    client.start()
    try:
        assert client.ping()["type"] == protocol.PONG
        ack = client.set_knob("cudnn_benchmark", True)
        assert ack["knobs"] == {"cudnn_benchmark": True} and ack["applies"] == {"cudnn_benchmark": "next_step"}
        assert wait_until(
            lambda: (client.view().state or {}).get("knobs", {}).get("applied") == {"cudnn_benchmark": True}, 5
        )
        with pytest.raises(JobRequestError, match="changes numerics"):
            client.set_knob("tf32", True)
        with pytest.raises(JobRequestError, match="bad value"):
            client.set_knob("num_workers", -1)
        diagnosis = client.diagnose(3, timeout=10)
        assert diagnosis["type"] == protocol.DIAGNOSIS and diagnosis["available"] is False  # no CUDA here
    finally:
        client.stop()


def test_attach_latency_first_step_sample_within_bounds(watch_shared: Any) -> None:
    job = watch_shared  # training already
    first = threading.Event()
    started = time.monotonic()
    client = JobClient(job.pid)
    client.start(lambda what: first.set() if what == protocol.STEPS and client.view().steps else None)
    try:
        assert first.wait(10)
        latency = time.monotonic() - started
    finally:
        client.stop()
    print(f"\nattach latency (JobClient start -> first step sample delivered): {latency * 1e3:.1f} ms")
    assert latency < 3.0


def test_connecting_to_a_pid_without_a_socket_fails_with_one_line(sock_dir: str) -> None:
    with pytest.raises(AttachError, match=f"no gpumon hook socket for pid {os.getpid()}"):
        JobClient(os.getpid()).connect()


# ---------------------------------------------------------------------------------------------
# A fake hook that misbehaves.


class FakeHook:
    """A Unix socket server at <sock_dir>/<pid>.sock that plays a script of raw byte chunks to one client."""

    def __init__(self, sock_dir: str, pid: int, chunks: list[bytes | float], close: bool = True) -> None:
        self.path = os.path.join(sock_dir, f"{pid}.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.chunks = chunks
        self.close = close
        self.received = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        conn.settimeout(0.2)
        for chunk in self.chunks:
            if isinstance(chunk, float):
                time.sleep(chunk)
            else:
                conn.sendall(chunk)
            try:
                self.received += conn.recv(65536)
            except (TimeoutError, OSError):
                pass
        if self.close:
            conn.close()
        else:
            time.sleep(30)

    def stop(self) -> None:
        self.server.close()


def line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


HELLO = {"type": "hello", "protocol": protocol.PROTOCOL_VERSION, "pid": os.getpid(), "argv": ["fake.py"]}


def steps(*seqs: int) -> dict[str, Any]:
    return {
        "type": "steps",
        "t": 1000.0 + seqs[-1],
        "last_seq": seqs[-1],
        "records": [
            {
                "seq": s,
                "t": 1000.0 + s,
                "wall_ms": 10.0,
                "data_ms": 4.0,
                "gpu_ms": None,
                "samples": 2,
                "source": "optimizer",
            }
            for s in seqs
        ],
    }


@pytest.fixture
def fake_hooks(sock_dir: str) -> Iterator[Any]:
    made: list[FakeHook] = []

    def make(chunks: list[bytes | float], close: bool = True) -> FakeHook:
        hook = FakeHook(sock_dir, os.getpid(), chunks, close)
        made.append(hook)
        return hook

    yield make
    for hook in made:
        hook.stop()


def test_garbage_and_a_line_cut_off_by_death_end_the_client_cleanly(fake_hooks: Any) -> None:
    fake_hooks(
        [
            line(HELLO),
            line(steps(1, 2)),
            b"this is not json\n",
            b'{"type": "steps", "records": 5}\n',
            line(steps(3)),
            b'{"type": "steps", "t": 1004.0, "rec',
        ]
    )
    client = JobClient(os.getpid())
    client.connect()
    client.start()
    try:
        assert client.wait_ended(5)
    finally:
        client.stop()
    view = client.view()
    assert [step.seq for step in view.steps] == [1, 2, 3]
    assert view.protocol_errors == 2
    assert view.end_reason == END_CLOSED  # our own pid is alive: the socket closed, the process did not exit


def test_a_hook_that_never_says_hello_times_out(fake_hooks: Any) -> None:
    fake_hooks([5.0], close=False)
    client = JobClient(os.getpid(), connect_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(AttachError, match="sent no hello"):
        client.connect()
    assert time.monotonic() - started < 2.0


def test_another_protocol_version_is_refused_with_a_clear_message(fake_hooks: Any) -> None:
    fake_hooks([line({**HELLO, "protocol": protocol.PROTOCOL_VERSION + 1})])
    with pytest.raises(AttachError, match="speaks gpumon protocol 2, this gpumon speaks 1"):
        JobClient(os.getpid()).connect()


def test_a_request_without_reply_times_out_and_stop_does_not_hang(fake_hooks: Any) -> None:
    fake_hooks([line(HELLO), 10.0], close=False)
    client = JobClient(os.getpid())
    client.connect()
    client.start()
    try:
        started = time.monotonic()
        with pytest.raises(JobRequestError, match="no knob_ack"):
            client.set_knob("num_workers", 2, timeout=0.5)
        assert time.monotonic() - started < 2.0
    finally:
        started = time.monotonic()
        client.stop()
        assert time.monotonic() - started < 1.5
    assert not client.view().ended  # a silent hook is not a dead one


def test_a_request_pending_when_the_job_dies_fails_at_once(fake_hooks: Any) -> None:
    fake_hooks([line(HELLO), 0.5])
    client = JobClient(os.getpid())
    client.connect()
    client.start()
    try:
        started = time.monotonic()
        with pytest.raises(JobRequestError, match=r"went away|not connected"):
            client.set_knob("num_workers", 2, timeout=10)
        assert time.monotonic() - started < 3.0
    finally:
        client.stop()


def _one_shot_hook(path: str, first_line: dict[str, Any], held: int) -> tuple[socket.socket, threading.Thread]:
    """A Unix socket with a full backlog (one connection `held` pending, backlog 0) that, once released, accepts
    and sends `first_line` to each connection."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    pending = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(held)]
    for sock in pending:
        sock.connect(path)

    def serve() -> None:
        time.sleep(0.2)  # the client meets the full backlog first (EAGAIN); no count is asserted on it
        for sock in pending:
            sock.close()
        for _ in range(held + 1):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                conn.sendall(protocol.encode(first_line))  # type: ignore[arg-type]
            except OSError:  # the held connection, closed by now
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_a_full_backlog_is_retried_within_the_deadline(tmp_path: Any) -> None:
    """A bare EAGAIN (the hook's backlog full under a flood) failed the attach at once."""
    from gpumon.jobs.connection import HookConnection

    path = str(tmp_path / f"{os.getpid()}.sock")
    hello = {"type": "hello", "protocol": protocol.PROTOCOL_VERSION, "pid": os.getpid(), "argv": ["x"]}
    listener, thread = _one_shot_hook(path, hello, held=1)
    try:
        conn = HookConnection(path, timeout=10.0)
        assert conn.hello["argv"] == ["x"]
        conn.sock.close()
    finally:
        listener.close()
        thread.join(5)


def test_a_hook_that_refuses_says_why(tmp_path: Any) -> None:
    """The line "sent 'error' instead of a hello" hid the hook's own reason (too many clients)."""
    from gpumon.jobs.connection import HookConnection

    path = str(tmp_path / f"{os.getpid()}.sock")
    refusal = {"type": "error", "code": "too_many_clients", "message": "too many clients (16)\x1b[2J"}
    listener, thread = _one_shot_hook(path, refusal, held=0)
    try:
        with pytest.raises(protocol.ProtocolError) as caught:
            HookConnection(path, timeout=10.0)
        text = str(caught.value)
        assert "too many clients (16)\\x1b[2J" in text and "too_many_clients" in text and "instead" not in text
    finally:
        listener.close()
        thread.join(5)
