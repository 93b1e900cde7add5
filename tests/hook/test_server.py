"""The hook's socket server in this process, fed by a HookRuntime that the test steps by hand."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from gpumon import protocol
from gpumon.hook import info as info_module
from gpumon.hook import server as server_module
from gpumon.hook import server_client as client_module
from gpumon.hook.runtime import HookRuntime
from gpumon.hook.server import HookServer
from gpumon.jobs.connection import HookConnection

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another uid needs root")


@pytest.fixture
def make_server(sock_dir: str, runtime: HookRuntime) -> Iterator[Any]:
    servers: list[HookServer] = []

    def make(**options: Any) -> HookServer:
        server = HookServer(runtime, directory=sock_dir, **options)
        assert server.start(), server.failure
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def server(make_server: Any) -> HookServer:
    return make_server()


def raw_connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(path)
    return sock


def read_until_eof(sock: socket.socket, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no EOF within {timeout} s; got {data[-200:]!r}") from None
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def test_directory_and_socket_are_private(server: HookServer, sock_dir: str) -> None:
    assert stat.S_IMODE(os.stat(sock_dir).st_mode) == 0o700
    st = os.lstat(server.path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert server.path == os.path.join(sock_dir, f"{os.getpid()}.sock")


def test_the_socket_appears_only_once_it_listens(
    sock_dir: str, runtime: HookRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan that finds a job's socket must be able to connect: one that found it between bind and listen had its
    connection refused and removed a live job's socket as stale. Nothing is at the socket's name before listen(),
    and a binding name left by a dead process with our pid is no obstacle."""
    final_path = os.path.join(sock_dir, f"{os.getpid()}.sock")
    there_at_listen: list[bool] = []

    class Watched(socket.socket):
        def listen(self, backlog: int = 0) -> None:
            there_at_listen.append(os.path.lexists(final_path))
            super().listen(backlog)

    os.mkdir(sock_dir, 0o700)
    open(os.path.join(sock_dir, f"{os.getpid()}.bind"), "w").close()
    monkeypatch.setattr(server_module.socket, "socket", Watched)
    server = HookServer(runtime, directory=sock_dir)
    try:
        assert server.start(), server.failure
        assert server.path == final_path
        assert there_at_listen == [False]
        assert os.listdir(sock_dir) == [f"{os.getpid()}.sock"]
        raw_connect(server.path).close()
    finally:
        server.stop()
    assert os.listdir(sock_dir) == []


@pytest.mark.parametrize("mode", [0o755, 0o777])
def test_a_loose_directory_is_refused_and_left_as_it_is(sock_dir: str, runtime: HookRuntime, mode: int) -> None:
    os.mkdir(sock_dir)
    os.chmod(sock_dir, mode)
    server = HookServer(runtime, directory=sock_dir)
    assert not server.start()
    assert server.failure == f"{sock_dir} has mode {mode:04o}, not 0700"
    assert stat.S_IMODE(os.stat(sock_dir).st_mode) == mode and os.listdir(sock_dir) == []


@needs_root
def test_someone_elses_directory_is_refused(sock_dir: str, runtime: HookRuntime) -> None:
    os.mkdir(sock_dir, 0o700)
    os.chown(sock_dir, NOBODY, NOBODY)
    server = HookServer(runtime, directory=sock_dir)
    assert not server.start()
    assert f"owned by uid {NOBODY}" in (server.failure or "")
    assert os.listdir(sock_dir) == []


def test_a_symlinked_directory_is_refused(sock_dir: str, runtime: HookRuntime, tmp_path: Any) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    os.symlink(target, sock_dir)
    server = HookServer(runtime, directory=sock_dir)
    assert not server.start()
    assert "symlink" in (server.failure or "")
    assert list(target.iterdir()) == []


def test_hello_and_simple_requests(server: HookServer, runtime: HookRuntime) -> None:
    with HookConnection(server.path) as conn:
        hello = conn.hello
        assert hello["pid"] == os.getpid() and hello["uid"] == os.getuid()
        assert hello["torch"] == torch.__version__ and hello["hook_version"]
        assert hello["cuda"]["initialized"] is False and hello["cuda"]["devices"] == []
        assert {"rank", "local_rank", "world_size", "run_id", "master_addr", "master_port"} <= set(hello["dist"])
        assert conn.request({"type": "ping", "id": "p1"}, ("pong",))["id"] == "p1"
        state = conn.request({"type": "get_state", "id": 5}, ("state",))
        assert state["id"] == 5 and state["hook"]["clients"] == 1 and state["last_seq"] == 0
        options = conn.request(
            {"type": "subscribe", "id": 2, "steps_interval": 0.001, "state": False}, ("subscribed",)
        )["options"]
        assert options["steps_interval"] == 0.05 and options["state"] is False


def test_steps_stream_with_backlog(server: HookServer, runtime: HookRuntime) -> None:
    for _ in range(300):
        runtime.on_manual_step(4)
    with HookConnection(server.path) as conn:
        first = conn.recv(2)
        while first is not None and first["type"] != "steps":
            first = conn.recv(2)
        assert first is not None
        assert [r["seq"] for r in first["records"]] == list(range(300 - server_module.DEFAULT_BACKLOG + 1, 301))
        assert first["stats"]["steps"] == 300
        conn.send({"type": "subscribe", "backlog": 4096, "steps_interval": 0.05})
        seen: list[int] = []
        while len(seen) < 300:
            msg = conn.recv(2)
            assert msg is not None
            if msg["type"] == "steps":
                assert len(msg["records"]) <= info_module.MAX_RECORDS_PER_MESSAGE
                seen += [r["seq"] for r in msg["records"]]
        assert seen == list(range(1, 301))
        runtime.on_manual_step(None)
        msg = conn.recv(2)
        while msg is not None and not (msg["type"] == "steps" and msg["records"]):
            msg = conn.recv(2)
        assert msg is not None and [r["seq"] for r in msg["records"]] == [301]
        assert msg["records"][0]["samples"] is None and msg["records"][0]["source"] == "manual"


def test_bad_input_gets_an_error_and_the_connection_survives(server: HookServer) -> None:
    with HookConnection(server.path) as conn:
        conn.sock.sendall(b"{oops\n\n   \n")
        reply = conn.recv(2)
        while reply is not None and reply["type"] != "error":
            reply = conn.recv(2)
        assert reply is not None and reply["code"] == protocol.E_BAD_JSON and "id" not in reply
        assert conn.request({"type": "ping", "id": 1}, ("pong",))["type"] == "pong"
        unknown = conn.request({"type": "teleport", "id": "u"}, ("pong",))
        assert (unknown["code"], unknown["id"]) == (protocol.E_UNKNOWN_TYPE, "u")
        bad = conn.request({"type": "diagnose", "id": "d", "steps": 0}, ("diagnosing",))
        assert bad["code"] == protocol.E_BAD_MESSAGE


@pytest.mark.parametrize(
    "size", [protocol.MAX_LINE + 1, protocol.MAX_LINE + 10, 2 * protocol.MAX_LINE, 3 * protocol.MAX_LINE]
)
def test_an_overlong_line_is_refused_and_closed(server: HookServer, size: int) -> None:
    """The answer arrives however much more than the limit was sent."""
    for _ in range(5):
        sock = raw_connect(server.path)
        try:
            sock.sendall(b"x" * size)
        except OSError:
            pass
        data = read_until_eof(sock)
        assert b'"code":"line_too_long"' in data, data[-200:]
        sock.close()


def test_a_client_sending_garbage_forever_is_closed(server: HookServer) -> None:
    sock = raw_connect(server.path)
    try:
        sock.sendall(b"garbage\n" * (server_module.MAX_CLIENT_ERRORS + 5))
    except OSError:
        pass
    data = read_until_eof(sock)
    assert data.count(b'"code":"bad_json"') == server_module.MAX_CLIENT_ERRORS
    assert b'"code":"too_many_errors"' in data
    sock.close()


def test_extra_clients_are_told_and_closed(make_server: Any) -> None:
    server = make_server(max_clients=2)
    first, second = HookConnection(server.path), HookConnection(server.path)
    third = raw_connect(server.path)
    data = read_until_eof(third)
    assert b'"code":"too_many_clients"' in data and b'"hello"' not in data
    first.close()
    wait_until(lambda: server.clients == 1)
    with HookConnection(server.path) as again:
        assert again.hello["pid"] == os.getpid()
    second.close()
    third.close()


def test_a_client_that_never_reads_loses_old_messages_then_is_dropped(make_server: Any, runtime: HookRuntime) -> None:
    server = make_server(client_buffer=16 * 1024, stall_timeout=0.5)
    lazy = raw_connect(server.path)
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lazy.sendall(b'{"type":"subscribe","steps_interval":0.05,"state_interval":0.25}\n')
    wait_until(lambda: server.clients == 1)
    (client,) = list(server._clients.values())
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    most_queued = 0
    deadline = time.monotonic() + 10
    while server.clients and time.monotonic() < deadline:
        for _ in range(200):
            runtime.on_manual_step(8)  # the training thread never waits for the server
        most_queued = max(most_queued, client.out_bytes)
        time.sleep(0.01)
    assert server.clients == 0, "the stalled client was not dropped"
    assert client.dropped_messages > 0
    assert most_queued <= 16 * 1024 + 64 * 1024  # the cap plus the newest message, which always stays
    lazy.close()


def test_diagnose_and_set_knob_go_through_the_step_boundary(server: HookServer, runtime: HookRuntime) -> None:
    benchmark = torch.backends.cudnn.benchmark
    try:
        with HookConnection(server.path) as conn:
            assert conn.request({"type": "diagnose", "id": 1, "steps": 3}, ("diagnosing",))["type"] == "diagnosing"
            busy = conn.request({"type": "diagnose", "id": 2, "steps": 3}, ("diagnosing",))
            assert busy["code"] == protocol.E_BUSY
            ack = conn.request(
                {"type": "set_knob", "id": 3, "knobs": {"cudnn_benchmark": not benchmark}}, ("knob_ack",)
            )
            assert ack["applies"] == {"cudnn_benchmark": "next_step"}
            assert conn.request({"type": "get_state", "id": 4}, ("state",))["knobs"]["pending"] == {
                "cudnn_benchmark": not benchmark
            }
            assert torch.backends.cudnn.benchmark == benchmark
            bad = conn.request({"type": "set_knob", "id": 5, "knobs": {"num_workers": -2}}, ("knob_ack",))
            assert bad["code"] == protocol.E_BAD_KNOB
            runtime.on_manual_step(None)
            assert torch.backends.cudnn.benchmark == (not benchmark)
            msg = conn.recv(3)
            while msg is not None and msg["type"] != "diagnosis":
                msg = conn.recv(3)
            assert msg is not None and msg["id"] == 1 and msg["available"] is False
            state = conn.request({"type": "get_state", "id": 6}, ("state",))
            assert state["knobs"]["applied"] == {"cudnn_benchmark": not benchmark} and state["knobs"]["pending"] == {}
    finally:
        torch.backends.cudnn.benchmark = benchmark


def test_stop_says_bye_and_removes_the_socket(server: HookServer, runtime: HookRuntime) -> None:
    conn = HookConnection(server.path)
    runtime.on_manual_step(None)
    server.stop()
    messages = list(conn.messages(timeout=2))
    assert messages[-1]["type"] == "bye" and messages[-1]["last_seq"] == 1
    assert not os.path.exists(server.path)
    conn.close()


def test_stop_sends_the_last_state_before_bye(server: HookServer, runtime: HookRuntime) -> None:
    """A job shorter than one state interval still gives its subscribers the state it ended with (its loaders)."""
    conn = HookConnection(server.path)
    conn.request({"type": "subscribe", "id": 1, "state_interval": 30, "steps": False}, ("subscribed",))
    first = conn.recv(timeout=5)  # the state a subscription starts with, before any step
    assert first is not None and first["type"] == "state" and first["last_seq"] == 0
    runtime.on_manual_step(None)
    runtime.on_manual_step(None)
    server.stop()
    messages = list(conn.messages(timeout=2))
    kinds = [message["type"] for message in messages]
    assert kinds[-2:] == ["state", "bye"] and messages[-2]["last_seq"] == 2, kinds
    conn.close()


@needs_root
def test_a_client_of_another_uid_is_refused(server: HookServer, sock_dir: str) -> None:
    def connect_as_nobody() -> str:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child becomes nobody and reports what it saw
            result = "?"
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(5)
                sock.connect(server.path)
                data = b""
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline and (chunk := sock.recv(4096)):
                    data += chunk
                result = "closed-silently" if not data else "got:" + data[:80].decode(errors="replace")
            except PermissionError:
                result = "permission-denied"
            except TimeoutError:
                result = "timeout"
            except BaseException as exc:  # noqa: BLE001
                result = f"error:{exc!r}"
            finally:
                os.write(write_end, result.encode())
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as pipe:
            return pipe.read().decode()

    os.chmod(os.path.dirname(sock_dir), 0o711)  # the fixture's parent: let nobody reach our directory
    assert connect_as_nobody() == "permission-denied"  # the 0700 directory already keeps others out
    # Test only: open the door so that the SO_PEERCRED check itself is what refuses.
    os.chmod(sock_dir, 0o755)
    os.chmod(server.path, 0o666)
    assert connect_as_nobody() == "closed-silently"
    with HookConnection(server.path) as conn:  # root still gets in
        assert conn.hello["pid"] == os.getpid()


def test_a_forked_child_leaves_the_parent_server_alone(server: HookServer) -> None:
    conn = HookConnection(server.path)
    pid = os.fork()
    if pid == 0:
        server.close_in_child()
        server.stop()  # not the owner: must do nothing
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.exists(server.path)
    assert conn.request({"type": "ping", "id": 1}, ("pong",))["type"] == "pong"
    with HookConnection(server.path) as other:
        assert other.hello["pid"] == os.getpid()
    conn.close()


def test_refused_socket_dirs_fall_back_to_a_private_one_and_are_reported(
    runtime: HookRuntime, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(protocol.SOCKET_DIR_ENV, raising=False)
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    a_file = tmp_path / "file"
    a_file.write_text("")
    missing = tmp_path / "no-parent" / "gpumon"
    directories = [str(link), str(missing), str(a_file)]
    if os.geteuid() == 0:  # another user's wide-open directory, as a hijacker would pre-create it
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chmod(theirs, 0o777)
        os.chown(theirs, NOBODY, NOBODY)
        directories.append(str(theirs))
    base = tmp_path / "private"
    base.mkdir()
    server = HookServer(runtime, directories=directories, private_base=str(base))
    assert server.start(), server.failure
    try:
        served_in = os.path.dirname(server.path)
        assert served_in.startswith(str(base / protocol.PRIVATE_DIR_PREFIX.format(uid=os.getuid())))
        assert protocol.unsafe_dir_reason(served_in) is None
        refused = server.socket_refused or ""
        assert f"{link} is a symlink" in refused and f"{a_file} is not a directory" in refused
        assert str(missing) not in refused  # absent, not hijacked: skipped quietly
        if os.geteuid() == 0:
            assert f"{tmp_path / 'theirs'} is owned by uid {NOBODY}" in refused
        with HookConnection(server.path) as conn:
            assert conn.hello["socket_refused"] == refused
            assert conn.request({"type": "get_state", "id": 1}, ("state",))["hook"]["socket_refused"] == refused
        assert list(target.iterdir()) == []
    finally:
        server.stop()
    again = HookServer(runtime, directories=directories, private_base=str(base))
    assert again.start()
    again.stop()
    assert os.path.dirname(again.path) == served_in  # a safe private directory is reused, not multiplied


def test_a_refused_override_directory_has_no_fallback(
    runtime: HookRuntime, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, str(link))
    server = HookServer(runtime, private_base=str(tmp_path))
    assert not server.start()
    assert "symlink" in (server.failure or "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "target"]


def test_a_chatty_client_is_slowed_down_not_dropped(server: HookServer) -> None:
    count = int(client_module.REQUEST_BURST) + 50
    with HookConnection(server.path) as conn:
        started = time.monotonic()
        conn.sock.sendall(b"".join(b'{"type":"ping","id":%d}\n' % n for n in range(count)))
        ids: list[int] = []
        while len(ids) < count:
            msg = conn.recv(5)
            assert msg is not None, f"only {len(ids)} pongs"
            if msg["type"] == "pong":
                ids.append(msg["id"])
        assert ids == list(range(count))
        assert time.monotonic() - started >= 0.7 * 50 / client_module.REQUEST_RATE
        assert server.clients == 1
