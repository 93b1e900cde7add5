"""End-to-end: real training loops (CPU torch) in subprocesses with the hook, queried over its socket."""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from hook_helpers import collect_records, get_state

from gpumon import protocol
from gpumon.jobs.connection import HookConnection


def _sockets(directory: str) -> list[str]:
    try:
        return sorted(name for name in os.listdir(directory) if name.endswith(".sock"))
    except FileNotFoundError:
        return []


def _finish(job: Any) -> None:
    """Release the job; it must exit 0 and leave no socket behind."""
    assert job.release() == 0, job.stderr()
    assert not os.path.exists(job.socket_path)


def test_optimizer_loop_reports_what_the_loop_measured(start_job: Any) -> None:
    job = start_job("--mode", "optimizer", "--steps", "30", "--item-sleep-ms", "2")
    with HookConnection(job.wait_socket()) as conn:
        assert conn.hello["pid"] == job.pid
        assert conn.hello["protocol"] == protocol.PROTOCOL_VERSION
        done = job.event("done")
        state = get_state(conn)
        assert state["last_seq"] == done["steps"] == 30
        assert state["step_source"] == protocol.SOURCE_OPTIMIZER
        records = collect_records(conn, 30)
    assert sorted(records) == list(range(1, 31))
    assert {r["source"] for r in records.values()} == {protocol.SOURCE_OPTIMIZER}
    assert [records[i]["samples"] for i in range(1, 31)] == done["samples"] == [8] * 30
    hook_waits = [records[i]["data_ms"] for i in range(1, 31)]
    loop_waits = done["data_wait_ms"]
    # The loop times next() from outside, the hook from inside __next__: equal up to call overhead.
    assert statistics.mean(loop_waits) >= 8 * 2.0
    assert abs(statistics.mean(hook_waits) - statistics.mean(loop_waits)) < 0.1 * statistics.mean(loop_waits)
    assert max(abs(h - w) for h, w in zip(hook_waits, loop_waits, strict=True)) < 2.0
    assert all(r["wall_ms"] >= r["data_ms"] for r in records.values())
    assert all(r["gpu_ms"] is None for r in records.values())
    (loader,) = state["dataloaders"]
    assert (loader["batch_size"], loader["num_workers"], loader["batches"]) == (8, 0, 30)
    assert loader["dataset"] == "SleepyDataset"
    assert state["memory"] is None and state["cuda"]["initialized"] is False
    assert state["precision"]["float32_matmul_precision"] == "highest"
    _finish(job)


@pytest.mark.parametrize(
    ("mode", "source", "slack"),
    [
        ("manual_sgd", protocol.SOURCE_BACKWARD, 1),  # p -= lr * p.grad after backward, DataLoader
        ("manual_sgd_nodl", protocol.SOURCE_BACKWARD, 1),  # the same without a DataLoader
        ("inference", protocol.SOURCE_DATALOADER, 1),  # no backward at all
        ("manual_step", protocol.SOURCE_MANUAL, 0),  # gpumon.hook.step(), no DataLoader
    ],
)
def test_steps_are_detected_without_an_optimizer(start_job: Any, mode: str, source: str, slack: int) -> None:
    job = start_job("--mode", mode, "--steps", "20", "--item-sleep-ms", "0.2")
    with HookConnection(job.wait_socket()) as conn:
        done = job.event("done")
        state = get_state(conn)
    assert done["steps"] == 20
    assert abs(state["last_seq"] - 20) <= slack, state["last_seq"]
    assert state["step_source"] == source
    _finish(job)


def test_forked_workers_get_no_socket_and_are_reported(start_job: Any, sock_dir: str) -> None:
    job = start_job(
        "--mode",
        "inference",
        "--steps",
        "12",
        "--workers",
        "2",
        "--start-method",
        "fork",
        "--persistent",
        "--item-sleep-ms",
        "0.5",
    )
    with HookConnection(job.wait_socket()) as conn:
        done = job.event("done")
        (pids,) = done["worker_pids"]
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{pid}") for pid in pids)  # workers still alive
        assert _sockets(sock_dir) == [f"{job.pid}.sock"]
        state = get_state(conn)
    (loader,) = state["dataloaders"]
    assert sorted(loader["worker_pids"]) == sorted(pids)
    assert (loader["num_workers"], loader["persistent_workers"], loader["prefetch_factor"]) == (2, True, 2)
    assert state["last_seq"] == 12
    _finish(job)
    assert _sockets(sock_dir) == []


def test_spawned_workers_reimporting_the_script_stay_silent(start_job: Any, sock_dir: str) -> None:
    # A spawn worker re-imports __main__, which runs `import gpumon.hook` again in the worker.
    job = start_job(
        "--mode",
        "inference",
        "--steps",
        "4",
        "--workers",
        "1",
        "--start-method",
        "spawn",
        "--persistent",
        "--item-sleep-ms",
        "0",
    )
    job.wait_socket()
    done = job.event("done")
    assert len(done["worker_pids"][0]) == 1
    assert _sockets(sock_dir) == [f"{job.pid}.sock"]
    _finish(job)


def test_errors_inside_the_hook_never_reach_the_job(start_job: Any) -> None:
    job = start_job("--mode", "optimizer", "--steps", "15", "--item-sleep-ms", "0.2", "--break-internals")
    with HookConnection(job.wait_socket()) as conn:
        done = job.event("done")
        state = get_state(conn)
        records = collect_records(conn, 15)
    assert done["steps"] == 15
    assert state["last_seq"] == 15  # the optimizer path still works
    # every fetch failed inside the hook, and the backward before the first optimizer step (after it the optimizer
    # marks the steps and on_backward, with nothing left to do, is no longer called)
    assert state["hook"]["errors"] >= 16
    assert "injected failure inside the hook" in state["hook"]["last_error"]
    assert all(r["samples"] is None for r in records.values())
    _finish(job)


def _try(action: Any) -> None:
    try:
        action()
    except OSError:
        pass


def _read_all(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, OSError):
        pass
    return data


def _read_until(sock: socket.socket, marker: bytes, timeout: float) -> bytes:
    """What the socket sends until `marker` arrives (or it closes, or `timeout` seconds pass)."""
    deadline = time.monotonic() + timeout
    data = b""
    while marker not in data and (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, OSError):
            break
        if not chunk:
            break
        data += chunk
    return data


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(path)
    return sock


def _greeted(path: str, timeout: float = 10.0) -> tuple[socket.socket, bytes]:
    """A connection the server has greeted, and what it has sent so far. Over its accept rate the server sheds new
    connections (closed unanswered, no greeting): such a connection is made again, until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        sock = _connect(path)
        data = _read_until(sock, b'"type":"hello"', max(0.1, deadline - time.monotonic()))
        if b'"type":"hello"' in data or time.monotonic() >= deadline:
            return sock, data
        sock.close()


def test_fuzzing_the_socket_while_training(start_job: Any, sock_dir: str) -> None:
    job = start_job("--mode", "optimizer", "--steps", "20", "--item-sleep-ms", "0.3", "--seconds", "4")
    path = job.wait_socket()
    rng = random.Random(1234)
    with HookConnection(path) as monitor:
        job.event("ready")  # the loop starts now and runs for 4 s; the fuzz below takes about 2 s
        before = get_state(monitor)["last_seq"]

        never_reads = _connect(path)
        never_reads.sendall(b'{"type":"subscribe","steps_interval":0.05,"state_interval":0.25}\n')

        crowd = []
        for _ in range(100):
            try:
                crowd.append(_connect(path))
            except OSError:
                pass
        greetings = [_read_all(s, 0.1) for s in crowd[:12]]
        hellos = sum(b'"type":"hello"' in g for g in greetings)
        assert hellos <= protocol_max_clients() - 2, greetings
        assert any(b'"too_many_clients"' in g for g in greetings), greetings
        for s in crowd:
            s.close()
        deadline = time.monotonic() + 5
        while get_state(monitor)["hook"]["clients"] > 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # the server notices the closed crowd

        # The crowd spent the server's accept budget: a new connection waits in the backlog until it refills (up to
        # a second's pause, longer on a loaded machine), or is shed over the rate and made again; each connection
        # below is greeted before its garbage goes in.
        noise, greeting = _greeted(path)
        assert b'"type":"hello"' in greeting
        for _ in range(20):
            _try(lambda: noise.sendall(bytes(rng.getrandbits(8) for _ in range(2048))))
        replies = _read_until(noise, b'"type":"error"', 10.0)
        noise.close()
        assert b'"type":"error"' in replies, replies[:300]

        partial = _connect(path)
        partial.sendall(b'{"type": "pi')
        partial.close()

        bad, greeting = _greeted(path)
        bad.sendall(b'{not json}\n{"type":"no_such_request","id":7}\n[1,2]\n')
        received = greeting + _read_until(bad, f'"{protocol.E_BAD_MESSAGE}"'.encode(), 10.0)
        if not received.endswith(b"\n"):
            received += _read_until(bad, b"\n", 10.0)  # the rest of the last line
        lines = [json.loads(line) for line in received.splitlines()]
        codes = [m.get("code") for m in lines if m["type"] == "error"]
        assert codes == [protocol.E_BAD_JSON, protocol.E_UNKNOWN_TYPE, protocol.E_BAD_MESSAGE], received[:600]
        bad.close()

        huge, _ = _greeted(path)
        # Just over the limit: it fits the socket's buffer, so the send never blocks on a paused reader.
        _try(lambda: huge.sendall(b"a" * (protocol.MAX_LINE + 1)))
        answer = _read_until(huge, b'"line_too_long"', 10.0)
        assert b'"line_too_long"' in answer, answer[:300]
        huge.close()

        assert monitor.request({"type": "ping", "id": "alive"}, ("pong",))["type"] == "pong"
        after = get_state(monitor)["last_seq"]
        assert after > before, f"the loop stopped stepping during the fuzz ({before} -> {after})"
        done = job.event("done")
        assert get_state(monitor)["last_seq"] == done["steps"]
        never_reads.close()
    _finish(job)
    assert _sockets(sock_dir) == []


def protocol_max_clients() -> int:
    from gpumon.hook.server import MAX_CLIENTS

    return MAX_CLIENTS


def test_injected_by_environment_and_chains_sitecustomize(start_job: Any, tmp_path: Path) -> None:
    other = tmp_path / "other_site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("MARKER = 'the job own sitecustomize ran'\n")
    env = protocol.injection_env({**os.environ, "PYTHONPATH": str(other)})
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [protocol.INJECT_DIR, str(other)]
    job = start_job("--no-import", "--mode", "inference", "--steps", "10", "--item-sleep-ms", "0.2", env=env)
    with HookConnection(job.wait_socket()) as conn:
        assert conn.hello["injected"] is True
        done = job.event("done")
        assert get_state(conn)["last_seq"] == 10
    assert done["sitecustomize"] == "the job own sitecustomize ran"
    assert done["hook_installed"] is True
    _finish(job)


def test_gpumon_hook_0_disables_it(start_job: Any, sock_dir: str) -> None:
    job = start_job(
        "--mode", "inference", "--steps", "5", "--item-sleep-ms", "0", env={**os.environ, "GPUMON_HOOK": "0"}
    )
    done = job.event("done")
    assert done["hook_installed"] is False
    assert _sockets(sock_dir) == []
    assert job.release() == 0


def test_knobs_from_the_environment_for_trial_runs(start_job: Any) -> None:
    env = protocol.injection_env(os.environ, knobs={"num_workers": 2, "cudnn_benchmark": True})
    job = start_job("--no-import", "--mode", "inference", "--steps", "6", "--item-sleep-ms", "0", env=env)
    with HookConnection(job.wait_socket()) as conn:
        done = job.event("done")
        state = get_state(conn)
    assert len(done["worker_pids"][0]) == 2  # the script asked for num_workers=0
    assert done["cudnn_benchmark"] is True
    assert state["knobs"]["applied"] == {"num_workers": 2, "cudnn_benchmark": True}
    assert state["dataloaders"][0]["num_workers"] == 2
    _finish(job)


def test_live_set_knob_and_diagnose_requests(start_job: Any) -> None:
    job = start_job("--mode", "inference", "--steps", "8", "--epochs", "2", "--item-sleep-ms", "0", go=True)
    with HookConnection(job.wait_socket()) as conn:
        job.event("ready")
        ack = conn.request({"type": "set_knob", "id": 1, "knobs": {"num_workers": 2}}, ("knob_ack",))
        assert ack["type"] == "knob_ack" and ack["applies"] == {"num_workers": "next_batch"}
        refused = conn.request({"type": "set_knob", "id": 2, "knobs": {"tf32": True}}, ("knob_ack",))
        assert refused["type"] == "error" and refused["code"] == protocol.E_BAD_KNOB
        started = conn.request({"type": "diagnose", "id": 3, "steps": 3}, ("diagnosing",))
        assert started == {"type": "diagnosing", "steps": 3, "id": 3}
        job.go()
        deadline = time.monotonic() + 20
        diagnosis = None
        while diagnosis is None and time.monotonic() < deadline:
            msg = conn.recv(0.5)
            if msg is not None and msg["type"] == protocol.DIAGNOSIS:
                diagnosis = msg
        done = job.event("done")
        state = get_state(conn)
    assert diagnosis is not None and diagnosis["id"] == 3
    assert diagnosis["available"] is False and "CUDA is not initialized" in diagnosis["reason"]
    first_epoch, second_epoch = done["worker_pids"]
    assert first_epoch == [] and len(second_epoch) == 2
    assert state["knobs"]["applied"] == {"num_workers": 2}
    assert state["last_seq"] == 16
    _finish(job)
