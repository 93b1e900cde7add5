"""The protocol module: encoding, validation, knobs, socket paths and their safety checks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from gpumon import protocol
from gpumon.jobs.connection import HookConnection


def test_encode_decode_round_trip() -> None:
    msg = {"type": "steps", "records": [{"seq": 1, "wall_ms": 2.5, "samples": None}], "stats": {}, "x": "é"}
    line = protocol.encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.decode(line) == msg
    assert protocol.decode(line.decode()) == msg


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{nope}\n", protocol.E_BAD_JSON),
        (b"\xff\xfe\n", protocol.E_BAD_JSON),
        (b"[1, 2]\n", protocol.E_BAD_MESSAGE),
        (b'{"no_type": 1}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": 5}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": "diagnose"}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": "diagnose", "steps": "10"}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": "diagnose", "steps": true}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": "subscribe", "steps_interval": "fast"}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": "set_knob", "knobs": [1]}\n', protocol.E_BAD_MESSAGE),
        (b'{"type": "hello", "pid": 1}\n', protocol.E_BAD_MESSAGE),
    ],
)
def test_decode_rejects_bad_lines_with_a_code(line: bytes, code: str) -> None:
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode(line)
    assert caught.value.code == code


def test_decode_limits_and_unknown_types() -> None:
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode(b'{"type":"ping","pad":"' + b"a" * protocol.MAX_LINE + b'"}\n', limit=protocol.MAX_LINE)
    assert caught.value.code == protocol.E_LINE_TOO_LONG
    assert protocol.decode(b'{"type": "from_the_future", "z": 1}') == {"type": "from_the_future", "z": 1}
    assert protocol.decode(b'{"type": "subscribe", "steps_interval": 1}')["steps_interval"] == 1


def test_encode_refuses_what_is_not_json() -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.encode({"type": "steps", "stats": {"x": float("nan")}})
    with pytest.raises(protocol.ProtocolError):
        protocol.encode({"records": []})


def test_encode_writes_out_lone_surrogates_as_utf8() -> None:
    """An undecodable byte of argv or a path (U+DCFF as Python holds it) is sent as `\\xff`."""
    line = protocol.encode({"type": "x", "argv": ['a\udcff"b', "\ud801", "\u00e9"], "k\udc80": 1})
    line.decode("utf-8")
    assert protocol.decode(line) == {"type": "x", "argv": ['a\\xff"b', "\\ud801", "\u00e9"], "k\\x80": 1}


def test_validate_knobs() -> None:
    assert protocol.validate_knobs({"num_workers": 4, "pin_memory": True}, live=True) == {
        "num_workers": 4,
        "pin_memory": True,
    }
    assert protocol.validate_knobs({"prefetch_factor": None}, live=True) == {"prefetch_factor": None}
    assert protocol.validate_knobs({"tf32": True, "float32_matmul_precision": "high"}, live=False)
    for bad in (
        {},
        [],
        {"num_workers": -1},
        {"num_workers": True},
        {"num_workers": 1.5},
        {"pin_memory": 1},
        {"float32_matmul_precision": "low"},
        {"batch_size": 64},
        {"prefetch_factor": 0},
    ):
        with pytest.raises(protocol.ProtocolError) as caught:
            protocol.validate_knobs(bad, live=False)
        assert caught.value.code == protocol.E_BAD_KNOB
    with pytest.raises(protocol.ProtocolError, match="trial run"):
        protocol.validate_knobs({"tf32": True}, live=True)


def test_socket_dir_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(protocol.SOCKET_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
    assert protocol.socket_dir() == "/run/user/4242/gpumon"
    assert protocol.socket_path(77) == "/run/user/4242/gpumon/77.sock"
    assert protocol.socket_dir(uid=os.getuid() + 1) == f"/tmp/gpumon-{os.getuid() + 1}"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert protocol.socket_dir() == f"/tmp/gpumon-{os.getuid()}"
    assert f"/run/user/{os.getuid()}/gpumon" in protocol.candidate_socket_dirs()
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, "/elsewhere")
    assert protocol.socket_dir() == "/elsewhere"
    assert protocol.candidate_socket_dirs() == ["/elsewhere"]
    assert protocol.pid_from_socket_path("/x/123.sock") == 123
    assert protocol.pid_from_socket_path("/x/abc.sock") is None


def test_unsafe_dir_reasons(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir(mode=0o700)
    assert protocol.unsafe_dir_reason(str(good)) is None
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    assert "mode 0755" in protocol.unsafe_dir_reason(str(loose))
    link = tmp_path / "link"
    link.symlink_to(good)
    assert "symlink" in protocol.unsafe_dir_reason(str(link))
    assert "owned by uid" in protocol.unsafe_dir_reason(str(good), uid=os.getuid() + 1)
    assert protocol.unsafe_dir_reason(str(tmp_path / "missing")) is not None


def test_listing_and_cleaning_stale_sockets(sock_dir: str) -> None:
    os.mkdir(sock_dir, 0o700)
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live_path = os.path.join(sock_dir, f"{os.getpid()}.sock")
    live.bind(live_path)
    live.listen(1)
    dead_pid = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead_path = os.path.join(sock_dir, f"{dead_pid}.sock")
    dead.bind(dead_path)
    dead.close()
    closed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    closed_path = os.path.join(sock_dir, "1.sock")  # pid 1 is alive, but nobody listens there
    closed.bind(closed_path)
    closed.close()
    Path(sock_dir, "notes.txt").write_text("not a socket")
    try:
        assert [pid for pid, _ in protocol.list_sockets()] == sorted([1, int(dead_pid), os.getpid()])
        assert not protocol.is_stale(live_path)
        assert protocol.is_stale(dead_path) and protocol.is_stale(closed_path)
        assert sorted(protocol.remove_stale_sockets()) == sorted([dead_path, closed_path])
        assert protocol.list_sockets() == [(os.getpid(), live_path)]
    finally:
        live.close()


def test_list_sockets_skips_an_unsafe_dir(sock_dir: str) -> None:
    os.mkdir(sock_dir, 0o755)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(sock_dir, "5.sock"))
    listener.close()
    assert protocol.list_sockets() == []


def test_injection_env() -> None:
    env = protocol.injection_env({"PYTHONPATH": f"/a{os.pathsep}{protocol.INJECT_DIR}", "GPUMON_KNOBS": "{}"})
    assert env["PYTHONPATH"] == f"{protocol.INJECT_DIR}{os.pathsep}/a"
    assert env[protocol.HOOK_ENV] == "1" and env[protocol.INJECTED_ENV] == "1"
    assert protocol.KNOBS_ENV not in env
    assert os.path.isfile(os.path.join(env["PYTHONPATH"].split(os.pathsep)[0], "sitecustomize.py"))
    env = protocol.injection_env({}, knobs={"num_workers": 8, "amp_bf16": True})  # amp_bf16: the script's own
    assert json.loads(env[protocol.KNOBS_ENV]) == {"num_workers": 8, "amp_bf16": True}
    with pytest.raises(protocol.ProtocolError):
        protocol.injection_env({}, knobs={"num_workers": "many"})


def _serve_once(path: str, payload: bytes) -> threading.Thread:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        conn.sendall(payload)
        conn.recv(10)
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_client_refuses_another_protocol_version(tmp_path: Path) -> None:
    path = str(tmp_path / "old.sock")
    thread = _serve_once(path, protocol.encode({"type": "hello", "protocol": 99, "pid": 1}))
    with pytest.raises(protocol.ProtocolError, match="protocol 99"):
        HookConnection(path)
    thread.join(2)


def test_client_reads_split_lines(tmp_path: Path) -> None:
    path = str(tmp_path / "ok.sock")
    hello = protocol.encode({"type": "hello", "protocol": protocol.PROTOCOL_VERSION, "pid": os.getpid()})
    pong = protocol.encode({"type": "pong", "id": 1})
    thread = _serve_once(path, hello + pong[:5])
    with HookConnection(path) as conn:
        assert conn.hello["pid"] == os.getpid()
        assert conn.recv(0.2) is None  # half a line is not a message
    thread.join(2)


def test_candidate_dirs_are_the_hooks_order_then_private_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    uid = os.getuid()
    monkeypatch.delenv(protocol.SOCKET_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
    fixed = ["/run/user/4242/gpumon", f"/run/user/{uid}/gpumon", f"/tmp/gpumon-{uid}"]
    assert protocol.fixed_socket_dirs() == fixed
    prefix = protocol.PRIVATE_DIR_PREFIX.format(uid=uid)
    private = tempfile.mkdtemp(prefix=prefix, dir=protocol.PRIVATE_DIR_BASE)
    loose = tempfile.mkdtemp(prefix=prefix, dir=protocol.PRIVATE_DIR_BASE)
    os.chmod(loose, 0o755)
    try:
        candidates = protocol.candidate_socket_dirs()
        assert candidates[:3] == fixed and private in candidates[3:] and loose not in candidates
    finally:
        os.rmdir(private)
        os.rmdir(loose)
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert protocol.fixed_socket_dirs() == [f"/tmp/gpumon-{uid}", f"/run/user/{uid}/gpumon"]


def test_pid_alive_counts_a_zombie_as_gone() -> None:
    assert protocol.pid_alive(os.getpid()) and protocol.pid_alive(1)
    assert not protocol.pid_alive(0) and not protocol.pid_alive(-1)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert not protocol.pid_alive(child.pid)  # exited, not yet reaped
    child.wait()
    assert not protocol.pid_alive(child.pid)


def test_a_wrongly_typed_field_keeps_the_request_id() -> None:
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode(b'{"type": "diagnose", "id": [1, "a"], "steps": "10"}')
    assert caught.value.request_id == [1, "a"] and caught.value.code == protocol.E_BAD_MESSAGE
    with pytest.raises(protocol.ProtocolError) as caught:
        protocol.decode(b'{"type": "ping", "id": 5, "x": ' + b"[" * 40 + b"]" * 40 + b"}")
    assert caught.value.code == protocol.E_BAD_JSON and caught.value.request_id is None  # refused unparsed
