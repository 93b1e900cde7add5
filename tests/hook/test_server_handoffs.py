"""No client can slow the job through the GIL: the hook's server thread gives the GIL up for every call that may
block (select, recv, send, epoll_ctl, a wait) and takes it back from the training thread afterwards, which costs the
job more than the server's CPU clock shows. So the loop takes its turns at most every TURN_S, each client gets at
most one send a turn, the streams fall due together, and every such call is charged to the budgets.

Each test asserts a bound the server must keep whatever the machine's load (load only makes it do less), counted by
the server itself or by its sockets, never a rate measured against a clock that a busy machine stretches."""

from __future__ import annotations

import collections
import itertools
import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from gpumon import protocol
from gpumon.hook import server as server_module
from gpumon.hook import server_client as client_module
from gpumon.hook.runtime import HookRuntime
from gpumon.hook.server import HookServer
from gpumon.hook.server_client import Client
from gpumon.jobs.connection import HookConnection
from tests.hook.test_server_budget import CPU_SLACK_S, flood, request_line

GET_STATE = request_line({"type": "get_state", "id": 7})
FAST_SUBSCRIBE = request_line({"type": "subscribe", "steps_interval": 0.05, "state_interval": 0.25})


class Counted(socket.socket):
    """A socket that counts its send and sendmsg calls (the server's: the ones accept() made)."""

    sends: ClassVar[collections.Counter[int]] = collections.Counter()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted = kwargs.get("fileno") is not None

    def send(self, data: Any, flags: int = 0) -> int:
        if self.accepted:
            Counted.sends[self.fileno()] += 1
        return super().send(data, flags)

    def sendmsg(self, buffers: Any, *args: Any) -> int:
        if self.accepted:
            Counted.sends[self.fileno()] += 1
        return super().sendmsg(buffers, *args)


@pytest.fixture
def server(sock_dir: str, backlog_runtime: HookRuntime, monkeypatch: pytest.MonkeyPatch) -> Iterator[HookServer]:
    """A server whose accepted connections count their sends (socket.accept builds them from socket.socket)."""
    Counted.sends = collections.Counter()
    monkeypatch.setattr(server_module.socket, "socket", Counted)
    server = HookServer(backlog_runtime, directory=sock_dir)
    assert server.start(), server.failure
    yield server
    server.stop()


def test_a_flood_gets_a_turn_of_the_loop_at_most_every_turn_s(server: HookServer) -> None:
    """8 clients flooding requests and re-subscriptions at once: the loop's turns begin at least TURN_S apart, and
    the thread wakes at most three times a turn (the select, the rest of a turn cut short, a wait for budget)."""
    turns, wakeups, started = server.turns, server.wakeups, time.monotonic()
    flood(server, [GET_STATE] * 4 + [FAST_SUBSCRIBE] * 4)
    elapsed = time.monotonic() - started
    made = server.turns - turns
    assert 0 < made <= elapsed / server_module.TURN_S + 1, f"{made} turns in {elapsed:.2f} s"
    assert server.wakeups - wakeups <= 3 * made + 2, f"{server.wakeups - wakeups} wakeups in {made} turns"


def test_every_call_that_gives_the_gil_up_is_charged_to_the_servers_budget(server: HookServer) -> None:
    """The server's CPU and HANDOFF_COST for each of its GIL handoffs stay within its budget together: without the
    handoffs charged, 8 get_state flooders made hundreds of sends a second within the same CPU."""
    handoffs, started = server.handoffs, time.monotonic()
    used, flooders = flood(server, [GET_STATE] * server_module.MAX_CLIENTS)
    elapsed = time.monotonic() - started
    made = server.handoffs - handoffs
    cost = used + made * server_module.HANDOFF_COST
    budget = server_module.SERVER_CPU_SHARE * elapsed + server_module.SERVER_CPU_BURST + CPU_SLACK_S
    assert cost <= budget, f"{used:.3f} s of CPU and {made} handoffs in {elapsed:.2f} s"
    assert made > 0 and any(msg["type"] == protocol.STATE for f in flooders for msg in f.replies())


def test_each_client_gets_at_most_one_send_a_turn_under_a_flood(server: HookServer) -> None:
    turns = server.turns
    flood(server, [GET_STATE] * 4 + [FAST_SUBSCRIBE] * 4)
    made = server.turns - turns
    assert Counted.sends, "no send counted"
    # each connection: one send a turn, and one more where a turn's send met a full socket and a writable event
    # came before the next turn's (at most one a turn too); the greeting's turn may come before `turns` was read
    worst = max(Counted.sends.values())
    assert worst <= 2 * (made + 1), f"a connection got {worst} sends in {made} turns"


def test_a_new_clients_greeting_goes_out_in_one_send(server: HookServer) -> None:
    """hello, state and the recent steps: three messages, one sendmsg (they were three sends, three handoffs)."""
    with HookConnection(server.path) as conn:
        kinds = [conn.hello["type"]]
        while len(kinds) < 3:
            msg = conn.recv(5)
            assert msg is not None
            kinds.append(msg["type"])
        assert kinds == [protocol.HELLO, protocol.STATE, protocol.STEPS]
        assert conn.request({"type": "ping", "id": 1}, (protocol.PONG,))["id"] == 1
    [(_fd, sends)] = Counted.sends.items()
    assert sends == 2, f"{sends} sends for the greeting and one pong"


def test_a_monitor_beside_a_flood_keeps_its_stream_and_its_answers(
    server: HookServer, backlog_runtime: HookRuntime
) -> None:
    """A dashboard's subscription (steps every 0.2 s, state every 1 s) beside 7 get_state flooders: the streams are
    served before the requests at every turn, so its steps go on (none more than MAX_GAP_S apart) and a ping gets its
    pong within MAX_GAP_S."""
    max_gap_s = 3.0
    stop = threading.Event()

    def train() -> None:  # the job goes on stepping, so every steps message has new records
        while not stop.is_set():
            backlog_runtime.on_manual_step(4)
            time.sleep(0.005)

    trainer = threading.Thread(target=train, daemon=True)
    with HookConnection(server.path) as conn:
        conn.request({"type": "subscribe", "id": "s", "steps_interval": 0.2, "state_interval": 1.0}, ("subscribed",))
        trainer.start()
        flooding = threading.Thread(target=flood, args=(server, [GET_STATE] * 7), daemon=True)
        flooding.start()
        seen: list[tuple[float, str, int]] = []
        pong_after: float | None = None
        ping_sent = time.monotonic()
        conn.send({"type": "ping", "id": "p"})
        while flooding.is_alive():
            msg = conn.recv(max_gap_s)
            assert msg is not None, f"nothing for {max_gap_s} s; before: {seen[-3:]}"
            now = time.monotonic()
            seen.append((now, msg["type"], msg.get("last_seq", 0)))
            if msg["type"] == protocol.PONG and pong_after is None:
                pong_after = now - ping_sent
        stop.set()
        flooding.join()
    trainer.join()
    steps = [(t, seq) for t, kind, seq in seen if kind == protocol.STEPS]
    assert pong_after is not None and pong_after < max_gap_s
    assert len(steps) >= 2 and steps[-1][1] > steps[0][1], "the stream stopped advancing"
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(steps)]
    assert max(gaps) < max_gap_s, f"steps gaps {[round(g, 2) for g in gaps]}"


def test_subscribers_fall_due_together_on_the_stream_grid(server: HookServer) -> None:
    """4 subscribers at the fastest rate: after each is served its next steps are at the same multiple of
    STREAM_GRID, so one wakeup serves them all (a phase each would cost a wakeup each)."""
    conns = [HookConnection(server.path) for _ in range(4)]
    try:
        for conn in conns:
            conn.request({"type": "subscribe", "id": 1, "steps_interval": 0.05, "state": False}, ("subscribed",))
        deadline = time.monotonic() + 10
        while True:
            clients = list(server._clients.values())
            due = {client.next_steps for client in clients}
            grid = server_module.STREAM_GRID
            on_grid = all(math.isclose(t / grid, round(t / grid)) for t in due)
            if len(clients) == 4 and len(due) == 1 and on_grid:
                return
            assert time.monotonic() < deadline, f"due times {sorted(due)}"
            time.sleep(0.01)
    finally:
        for conn in conns:
            conn.close()


@pytest.mark.parametrize(("now", "interval"), [(100.0, 0.05), (100.001, 0.05), (100.024, 0.05), (100.03, 0.2)])
def test_on_grid_is_a_grid_time_about_interval_ahead(now: float, interval: float) -> None:
    due = server_module._on_grid(now, interval)
    grid = server_module.STREAM_GRID
    assert math.isclose(due / grid, round(due / grid))
    assert now < due <= now + interval + grid / 2 + 1e-9


class FakeSocket:
    """Takes at most `room` bytes a call; records each sendmsg's buffers."""

    def __init__(self, room: int, fail: bool = False) -> None:
        self.room, self.fail = room, fail
        self.calls: list[list[bytes]] = []
        self.data = b""

    def fileno(self) -> int:
        return 99

    def sendmsg(self, buffers: list[Any]) -> int:
        self.calls.append([bytes(b) for b in buffers])
        if self.fail:
            raise BrokenPipeError
        if self.room == 0:
            raise BlockingIOError
        chunk = b"".join(bytes(b) for b in buffers)[: self.room]
        self.room -= len(chunk)
        self.data += chunk
        return len(chunk)


def test_queued_messages_go_out_in_one_sendmsg_and_a_partial_send_resumes_where_it_stopped() -> None:
    sock = FakeSocket(room=1000)
    client = Client(sock, 0.0, cursor=0)  # type: ignore[arg-type]
    messages = [b"%03d" % i + b"x" * 106 + b"\n" for i in range(20)]  # 110 bytes each
    for message in messages:
        client.queue(message, 1 << 20, 0.0)
    assert client.send_queued(1.0) == 1  # 1000 of 2200 bytes taken: the socket is full, no second try
    assert sock.calls[0] == messages[: client_module.MAX_SEND_BUFFERS]
    assert sock.data == b"".join(messages)[:1000]
    assert len(client.out) == 11 and client.head_sent == 1000 - 9 * 110  # the 10th message, partly sent
    assert client.out_bytes == 2200 - 9 * 110  # the queued messages' bytes, the one being sent whole
    sock.room = 0
    assert client.send_queued(2.0) == 1  # EAGAIN: one call
    sock.room = 1 << 20
    assert client.send_queued(3.0) == 1
    assert sock.data == b"".join(messages) and not client.out and client.out_bytes == 0 and client.head_sent == 0
    assert client.last_progress == 3.0


def test_a_failed_sendmsg_is_reported_with_its_calls_negated() -> None:
    client = Client(FakeSocket(room=10, fail=True), 0.0, cursor=0)  # type: ignore[arg-type]
    client.queue(b"x\n", 1 << 20, 0.0)
    assert client.send_queued(1.0) == -1


def test_more_buffers_than_one_call_takes_go_out_in_a_few_calls() -> None:
    sock = FakeSocket(room=1 << 20)
    client = Client(sock, 0.0, cursor=0)  # type: ignore[arg-type]
    for i in range(client_module.MAX_SEND_BUFFERS * 2 + 1):
        client.queue(b"%d\n" % i, 1 << 20, 0.0)
    assert client.send_queued(1.0) == 3
    assert [len(call) for call in sock.calls] == [client_module.MAX_SEND_BUFFERS] * 2 + [1]


def test_clients_that_hung_up_in_the_same_turn_never_keep_a_live_one_out(
    sock_dir: str, backlog_runtime: HookRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood's connections closed before the server accepted them are admitted in the same turn as a live client
    after them (their greetings go out at the turn's end, so nothing has failed yet): a full table of them reaps the
    hung-up ones instead of refusing the live client. The loop is driven by hand, one turn, so the order is fixed."""
    monkeypatch.setattr(HookServer, "_run", lambda self: None)
    server = HookServer(backlog_runtime, directory=sock_dir, max_clients=2)
    assert server.start(), server.failure
    try:
        for _ in range(2):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
                gone.connect(server.path)
        live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        live.connect(server.path)
        server._cpu_mark = time.thread_time()  # as the thread's loop starts: its CPU clock from here
        server._serve_once()
        live.settimeout(5.0)
        first = json.loads(live.recv(65536).split(b"\n", 1)[0])
        assert first["type"] == protocol.HELLO, first
        assert len(server._clients) == 1
        live.close()
    finally:
        server.stop()
        server._cleanup()


def test_the_streams_leave_the_servers_reserve_to_a_new_client(
    sock_dir: str, backlog_runtime: HookRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscriber to a very fast job (a `steps` line costing 2 ms of CPU) is due while the server has less than
    SERVER_STREAM_RESERVE of its budget left: its stream waits, and a new client arriving in the same turn is greeted
    (before, the stream spent the rest and the newcomer waited a whole debt, seconds on a loaded machine). One turn,
    driven by hand, so the order is fixed."""
    monkeypatch.setattr(HookServer, "_run", lambda self: None)
    server = HookServer(backlog_runtime, directory=sock_dir)
    assert server.start(), server.failure
    lines_built = [0]
    next_line = server._steps_lines.next_line

    def costly_next_line(*args: Any, **kwargs: Any) -> Any:
        lines_built[0] += 1
        until = time.thread_time() + 0.002
        while time.thread_time() < until:
            pass
        return next_line(*args, **kwargs)

    try:
        subscriber = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        subscriber.connect(server.path)
        server._cpu_mark = time.thread_time()
        server._serve_once()  # greets the subscriber
        [client] = server._clients.values()
        monkeypatch.setattr(server._steps_lines, "next_line", costly_next_line)
        newcomer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        newcomer.connect(server.path)
        now = time.monotonic()
        client.next_steps = now - 1.0  # due
        server._cpu.tokens, server._cpu.stamp = server_module.SERVER_STREAM_RESERVE * 0.8, now
        server._next_turn = now
        server._cpu_mark = time.thread_time()
        server._serve_once()
        newcomer.settimeout(5.0)
        first = json.loads(newcomer.recv(65536).split(b"\n", 1)[0])
        assert first["type"] == protocol.HELLO, first
        assert lines_built[0] <= 2, "the due stream ran on the reserve"  # the newcomer's greeting: one or two lines
        assert client.next_steps < now, "the stream is still due"
        subscriber.close()
        newcomer.close()
    finally:
        server.stop()
        server._cleanup()


def test_a_paused_client_in_debt_does_not_make_the_loop_turn_for_nothing(
    sock_dir: str, backlog_runtime: HookRuntime
) -> None:
    """A client whose input pause is over but whose CPU budget is spent is read again only once it has budget: the
    loop's wait runs until then, instead of a turn every TURN_S that charges the server for nothing."""
    server = HookServer(backlog_runtime, directory=sock_dir)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        now = time.monotonic()
        client = Client(conn, now, cursor=0)
        client.steps = client.state = False
        client.paused_until = now - 0.5
        client.cpu.tokens, client.cpu.stamp = -client_module.CPU_BURST, now
        server._clients[client.fd] = client
        assert server._timeout(now) == pytest.approx(min(1.0, client_module.CPU_BURST / client_module.CPU_SHARE))
    finally:
        conn.close()


def test_a_replay_held_back_by_its_budget_goes_out_in_few_turns(
    server: HookServer, backlog_runtime: HookRuntime
) -> None:
    """A client re-subscribing with the longest backlog 5 times a second (the flood that cost the CPU job the most)
    while the job steps: its replays outrun its budget. The loop wakes for them once STREAM_BATCH of budget is back,
    not for every line (38 turns a second before, on the VM; each a GIL handoff the job pays)."""
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            backlog_runtime.on_manual_step(4)
            time.sleep(0.001)

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    line = request_line({"type": "subscribe", "backlog": protocol.BACKLOG_MAX})
    received = 0
    seconds = 3.0
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(server.path)
        sock.setblocking(False)
        turns, started = server.turns, time.monotonic()
        next_request = started
        while time.monotonic() - started < seconds:
            if time.monotonic() >= next_request:
                sock.send(line)
                next_request += 0.2
            try:
                received += len(sock.recv(1 << 20))
            except BlockingIOError:
                pass
            time.sleep(0.002)
        taken = server.turns - turns
    stop.set()
    trainer.join()
    assert received > 0
    assert taken <= 15 * seconds, f"{taken} turns in {seconds:g} s for one re-subscribing client"
