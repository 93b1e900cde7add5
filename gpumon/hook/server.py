"""The hook's Unix socket server: a daemon thread that streams steps and state to a few local clients.

Never blocks the training thread (it only reads the runtime's bounded structures and queues requests
in `runtime.control`), never waits for a client (non-blocking sockets, a bounded outgoing buffer per
client whose oldest messages are dropped), and never lets an exception out of its thread.
"""

from __future__ import annotations

import os
import selectors
import socket
import stat
import threading
import time
from collections import deque
from typing import Any

from gpumon import protocol
from gpumon.hook import info
from gpumon.hook.runtime import R_SEQ, HookRuntime

MAX_CLIENTS = 8
CLIENT_BUFFER = 1024 * 1024
"""Bytes queued for one client before its oldest messages are dropped."""
STALL_TIMEOUT = 20.0
"""A client with queued output that has taken nothing for this long is disconnected."""
MAX_CLIENT_ERRORS = 32
MAX_RECORDS_PER_MESSAGE = 256
DEFAULT_BACKLOG = 256
STEPS_INTERVAL = 0.2
STATE_INTERVAL = 1.0
STEPS_HEARTBEAT = 1.0
"""A `steps` message goes out at least this often (fresh stats) even without new steps."""
_RECV_CHUNK = 65536
_MAX_RECV_PER_WAKE = 16
_MAX_ACCEPT_PER_WAKE = 64
_MAX_CONSECUTIVE_FAILURES = 50


def prepare_socket_dir(directory: str) -> str | None:
    """Create (mode 0700) or check the socket directory; return why it is unusable, or None.

    The umask is left alone (it is process-wide and the job may be creating files on another
    thread): mkdir with 0700 can only come out narrower, and a directory of ours with looser bits
    is tightened to 0700. Someone else's directory, or a symlink, is refused.
    """
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create {directory}: {exc.strerror}"
    try:
        st = os.lstat(directory)
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return protocol.unsafe_dir_reason(directory) or f"{directory} is unusable"
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            os.chmod(directory, 0o700, follow_symlinks=False)
        except (OSError, NotImplementedError):
            return protocol.unsafe_dir_reason(directory)
    return protocol.unsafe_dir_reason(directory)


class _Client:
    __slots__ = ("sock", "fd", "out", "out_bytes", "head_sent", "inbuf", "errors", "dropped_messages",
                 "last_progress", "steps", "state", "steps_interval", "state_interval", "next_steps", "next_state",
                 "last_steps_sent", "cursor", "closed", "want_write")

    def __init__(self, sock: socket.socket, now: float, cursor: int) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.out: deque[bytes] = deque()
        self.out_bytes = 0
        self.head_sent = 0
        self.inbuf = bytearray()
        self.errors = 0
        self.dropped_messages = 0
        self.last_progress = now
        self.steps = True
        self.state = True
        self.steps_interval = STEPS_INTERVAL
        self.state_interval = STATE_INTERVAL
        self.next_steps = now + STEPS_INTERVAL
        self.next_state = now + STATE_INTERVAL
        self.last_steps_sent = now
        self.cursor = cursor
        self.closed = False
        self.want_write = False


class HookServer:
    """Serves one process's socket. `start()` returns False (and stays silent) when it cannot."""

    def __init__(self, runtime: HookRuntime, *, directory: str | None = None, installed_at: float | None = None,
                 injected: bool = False, max_clients: int = MAX_CLIENTS, client_buffer: int = CLIENT_BUFFER,
                 stall_timeout: float = STALL_TIMEOUT) -> None:
        self.runtime = runtime
        self.directory = directory or protocol.socket_dir()
        self.path = os.path.join(self.directory, f"{os.getpid()}.sock")
        self.installed_at = time.time() if installed_at is None else installed_at
        self.injected = injected
        self.max_clients = max_clients
        self.client_buffer = client_buffer
        self.stall_timeout = stall_timeout
        self.owner_pid = os.getpid()
        self.failure: str | None = None
        self._clients: dict[int, _Client] = {}
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake_r = self._wake_w = -1
        self._inode: int | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_reason = "exit"
        self._cleaned = False

    @property
    def clients(self) -> int:
        return len(self._clients)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> bool:
        reason = prepare_socket_dir(self.directory)
        if reason is not None:
            self.failure = reason
            return False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if os.path.lexists(self.path):
                os.unlink(self.path)  # our pid's name: a stale socket of a dead process with the same pid
            listener.bind(self.path)
            os.chmod(self.path, 0o600)
            self._inode = os.lstat(self.path).st_ino
            listener.listen(16)
            listener.setblocking(False)
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            selector = selectors.DefaultSelector()
            selector.register(listener, selectors.EVENT_READ, "listen")
            selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        except OSError as exc:
            self.failure = f"cannot serve {self.path}: {exc.strerror or exc}"
            listener.close()
            self._close_pipe()
            self._unlink()
            return False
        self._listener = listener
        self._selector = selector
        self._thread = threading.Thread(target=self._run, name="gpumon-hook-server", daemon=True)
        self._thread.start()
        return True

    def stop(self, reason: str = "exit", timeout: float = 0.5) -> None:
        """Send `bye` (best effort), close every connection and remove the socket. Owner process only."""
        if os.getpid() != self.owner_pid or self._thread is None:
            return
        self._stop_reason = reason
        self._stopping = True
        self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if self._thread.is_alive():
            self._unlink()  # the thread is stuck somewhere; at least leave no socket behind
        else:
            self._cleanup()

    def close_in_child(self) -> None:
        """After fork, in the child: drop our copies of the descriptors; never touch the parent's socket."""
        self._stopping = True
        self._cleaned = True
        for client in list(self._clients.values()):
            _close_quietly(client.sock)
        self._clients.clear()
        if self._listener is not None:
            _close_quietly(self._listener)
        if self._selector is not None:
            try:
                self._selector.close()  # closes the epoll fd copy only; the parent's registrations stay
            except Exception:  # noqa: BLE001
                pass
        self._close_pipe()
        self._thread = None

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = -1

    def _unlink(self) -> None:
        try:
            if self._inode is not None and os.lstat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass

    def _cleanup(self) -> None:
        if self._cleaned:
            return
        self._cleaned = True
        self._unlink()
        for client in list(self._clients.values()):
            self._drop(client)
        if self._selector is not None:
            try:
                self._selector.close()
            except Exception:  # noqa: BLE001
                pass
        if self._listener is not None:
            _close_quietly(self._listener)
        self._close_pipe()

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                self._serve_once()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - never out of this thread
                self.runtime.error(exc)
                failures += 1
                if failures >= _MAX_CONSECUTIVE_FAILURES:
                    break
                time.sleep(0.05)
        try:
            self._say_goodbye()
        except Exception as exc:  # noqa: BLE001
            self.runtime.error(exc)
        try:
            self._cleanup()
        except Exception as exc:  # noqa: BLE001
            self.runtime.error(exc)

    def _serve_once(self) -> None:
        selector = self._selector
        assert selector is not None
        timeout = self._timeout()
        for key, mask in selector.select(timeout):
            if key.data == "listen":
                self._accept()
            elif key.data == "wake":
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except OSError:
                    pass
            else:
                client = key.data
                if mask & selectors.EVENT_READ and not client.closed:
                    self._read(client)
                if mask & selectors.EVENT_WRITE and not client.closed:
                    self._flush(client)
        if not self._stopping:
            self._tick()

    def _timeout(self) -> float | None:
        if not self._clients:
            return None
        due = [c.next_steps for c in self._clients.values() if c.steps]
        due += [c.next_state for c in self._clients.values() if c.state]
        if not due:
            return 1.0  # still wake now and then for the stall check
        return max(0.0, min(min(due) - time.monotonic(), 1.0))

    def _accept(self) -> None:
        assert self._listener is not None
        for _ in range(_MAX_ACCEPT_PER_WAKE):
            try:
                conn, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                conn.setblocking(False)
                _pid, uid, _gid = protocol.peer_credentials(conn)
            except OSError:
                _close_quietly(conn)
                continue
            if not protocol.peer_allowed(uid):
                _close_quietly(conn)
                continue
            if len(self._clients) >= self.max_clients:
                try:
                    conn.send(protocol.encode(protocol.error_message(
                        protocol.E_TOO_MANY_CLIENTS, f"at most {self.max_clients} clients at a time")))
                except OSError:
                    pass
                _close_quietly(conn)
                continue
            self._add_client(conn)

    def _add_client(self, conn: socket.socket) -> None:
        now = time.monotonic()
        client = _Client(conn, now, cursor=max(0, self.runtime.seq - DEFAULT_BACKLOG))
        self._clients[client.fd] = client
        assert self._selector is not None
        self._selector.register(conn, selectors.EVENT_READ, client)
        self._send(client, info.hello(self.runtime, started=self.installed_at, injected=self.injected))
        self._send(client, self._state())
        records = self.runtime.snapshot_records()
        self._send_steps(client, records, info.step_stats(self.runtime, records, self.runtime.clock()))

    # -- input ----------------------------------------------------------------------------------

    def _read(self, client: _Client) -> None:
        for _ in range(_MAX_RECV_PER_WAKE):
            try:
                chunk = client.sock.recv(_RECV_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._drop(client)
                return
            if not chunk:
                self._drop(client)
                return
            client.inbuf += chunk
            self._handle_lines(client)
            if client.closed:
                return

    def _handle_lines(self, client: _Client) -> None:
        buf = client.inbuf
        while not client.closed:
            newline = buf.find(b"\n")
            if (newline < 0 and len(buf) >= protocol.MAX_LINE) or newline + 1 > protocol.MAX_LINE:
                self._refuse(client, protocol.E_LINE_TOO_LONG, f"a request line is at most {protocol.MAX_LINE} bytes")
                return
            if newline < 0:
                return
            line = bytes(buf[: newline + 1])
            del buf[: newline + 1]
            if line.strip():
                self._handle_request(client, line)

    def _refuse(self, client: _Client, code: str, message: str) -> None:
        """Answer with an error and hang up (what is queued gets one chance to go out)."""
        self._send(client, protocol.error_message(code, message))
        self._flush(client)
        self._drop(client)

    def _handle_request(self, client: _Client, line: bytes) -> None:
        try:
            msg = protocol.decode(line, limit=protocol.MAX_LINE)
        except protocol.ProtocolError as exc:
            self._client_error(client, exc.code, str(exc), None)
            return
        kind = msg["type"]
        request_id = msg.get("id")
        if kind not in protocol.REQUEST_TYPES:
            self._client_error(client, protocol.E_UNKNOWN_TYPE, f"unknown request type {kind!r}", request_id)
            return
        reply: dict[str, Any]
        if kind == protocol.PING:
            reply = {"type": protocol.PONG, "t": round(time.time(), 4)}
        elif kind == protocol.GET_STATE:
            reply = dict(self._state())
        elif kind == protocol.SUBSCRIBE:
            reply = self._subscribe(client, msg)
        elif kind == protocol.DIAGNOSE:
            steps = msg["steps"]
            if not 1 <= steps <= protocol.DIAGNOSE_MAX_STEPS:
                self._client_error(client, protocol.E_BAD_MESSAGE,
                                   f"steps must be 1..{protocol.DIAGNOSE_MAX_STEPS}", request_id)
                return
            if self.runtime.diagnosing or len(self.runtime.control) >= 60:
                self._client_error(client, protocol.E_BUSY, "a diagnosis is already running", request_id)
                return
            self.runtime.control.append(("diagnose", steps, request_id))
            reply = {"type": protocol.DIAGNOSING, "steps": steps}
        else:  # SET_KNOB
            try:
                knobs = protocol.validate_knobs(msg["knobs"], live=True)
            except protocol.ProtocolError as exc:
                self._client_error(client, exc.code, str(exc), request_id)
                return
            if len(self.runtime.control) >= 60:
                self._client_error(client, protocol.E_BUSY, "too many requests waiting for a step", request_id)
                return
            self.runtime.control.append(("knobs", knobs, request_id))
            reply = {"type": protocol.KNOB_ACK, "knobs": knobs,
                     "applies": {name: protocol.KNOBS[name]["applies"] for name in knobs}}
        if request_id is not None:
            reply["id"] = request_id
        self._send(client, reply)

    def _subscribe(self, client: _Client, msg: dict[str, Any]) -> dict[str, Any]:
        now = time.monotonic()
        if "steps" in msg:
            client.steps = msg["steps"]
        if "state" in msg:
            client.state = msg["state"]
        if "steps_interval" in msg:
            client.steps_interval = min(5.0, max(0.05, float(msg["steps_interval"])))
        if "state_interval" in msg:
            client.state_interval = min(30.0, max(0.25, float(msg["state_interval"])))
        if "backlog" in msg:
            backlog = min(protocol.BACKLOG_MAX, max(0, msg["backlog"]))
            client.cursor = max(0, self.runtime.seq - backlog)
            client.next_steps = now
        client.next_steps = min(client.next_steps, now + client.steps_interval)
        client.next_state = min(client.next_state, now + client.state_interval)
        return {"type": protocol.SUBSCRIBED, "options": {
            "steps": client.steps, "state": client.state, "steps_interval": client.steps_interval,
            "state_interval": client.state_interval}}

    def _client_error(self, client: _Client, code: str, message: str, request_id: Any) -> None:
        client.errors += 1
        if client.errors > MAX_CLIENT_ERRORS:
            self._refuse(client, protocol.E_TOO_MANY_ERRORS, f"more than {MAX_CLIENT_ERRORS} bad requests")
            return
        self._send(client, protocol.error_message(code, message, request_id))

    # -- output ---------------------------------------------------------------------------------

    def _state(self) -> protocol.State:
        return info.state(self.runtime, clients=len(self._clients), installed_at=self.installed_at)

    def _tick(self) -> None:
        now = time.monotonic()
        outbox = self.runtime.outbox
        while outbox:
            message = outbox.popleft()
            for client in list(self._clients.values()):
                self._send(client, message)
        records: list[list[Any]] | None = None
        stats: protocol.StepStats | None = None
        state: protocol.State | None = None
        for client in list(self._clients.values()):
            if client.closed:
                continue
            if client.steps and now >= client.next_steps:
                client.next_steps = now + client.steps_interval
                if records is None:
                    records = self.runtime.snapshot_records()
                    stats = info.step_stats(self.runtime, records, self.runtime.clock())
                last_seq = records[-1][R_SEQ] if records else 0
                if last_seq > client.cursor or now - client.last_steps_sent >= STEPS_HEARTBEAT:
                    self._send_steps(client, records, stats)  # type: ignore[arg-type]
            if client.state and now >= client.next_state:
                client.next_state = now + client.state_interval
                if state is None:
                    state = self._state()
                self._send(client, state)
            if client.out and now - client.last_progress > self.stall_timeout:
                self._drop(client)

    def _send_steps(self, client: _Client, records: list[list[Any]], stats: protocol.StepStats) -> None:
        """Send the records newer than the client's cursor (in messages of at most MAX_RECORDS_PER_MESSAGE),
        or just fresh stats when there are none. Records already gone from the runtime count as dropped."""
        last_seq = records[-1][R_SEQ] if records else 0
        new: list[list[Any]] = []
        dropped = 0
        if records and last_seq > client.cursor:
            first_seq = records[0][R_SEQ]
            dropped = max(0, first_seq - (client.cursor + 1))
            new = records[max(0, client.cursor + 1 - first_seq):]
        client.cursor = max(client.cursor, last_seq)
        client.last_steps_sent = time.monotonic()
        for start in range(0, max(1, len(new)), MAX_RECORDS_PER_MESSAGE):
            chunk = new[start:start + MAX_RECORDS_PER_MESSAGE]
            self._send(client, protocol.Steps(
                type=protocol.STEPS, t=round(time.time(), 4), last_seq=chunk[-1][R_SEQ] if chunk else last_seq,
                records=[info.record_dict(self.runtime, r) for r in chunk], dropped=dropped, stats=stats))
            dropped = 0

    def _send(self, client: _Client, message: Any) -> None:
        """Queue a message for `client`, dropping its oldest queued ones beyond the buffer cap."""
        if client.closed:
            return
        try:
            data = protocol.encode(message)
        except protocol.ProtocolError as exc:
            self.runtime.error(exc)
            return
        if not client.out:
            client.last_progress = time.monotonic()
        client.out.append(data)
        client.out_bytes += len(data)
        first_droppable = 1 if client.head_sent else 0
        # The newest message always stays, so memory is bounded by the cap plus one message.
        while client.out_bytes > self.client_buffer and len(client.out) > first_droppable + 1:
            old = client.out[first_droppable]
            del client.out[first_droppable]
            client.out_bytes -= len(old)
            client.dropped_messages += 1
        self._flush(client)

    def _flush(self, client: _Client) -> None:
        while client.out and not client.closed:
            head = client.out[0]
            try:
                sent = client.sock.send(memoryview(head)[client.head_sent:])
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(client)
                return
            client.last_progress = time.monotonic()
            client.head_sent += sent
            if client.head_sent >= len(head):
                client.out.popleft()
                client.out_bytes -= len(head)
                client.head_sent = 0
        self._want_write(client, bool(client.out))

    def _want_write(self, client: _Client, want: bool) -> None:
        if client.closed or client.want_write == want or self._selector is None:
            return
        client.want_write = want
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want else 0)
        try:
            self._selector.modify(client.sock, events, client)
        except (KeyError, ValueError, OSError):
            self._drop(client)

    def _drop(self, client: _Client) -> None:
        if client.closed:
            return
        client.closed = True
        self._clients.pop(client.fd, None)
        if self._selector is not None:
            try:
                self._selector.unregister(client.sock)
            except (KeyError, ValueError, OSError):
                pass
        try:
            client.sock.shutdown(socket.SHUT_RDWR)  # an EOF now, even if a forked child holds a copy
        except OSError:
            pass
        _close_quietly(client.sock)

    def _say_goodbye(self) -> None:
        if not self._clients:
            return
        while self.runtime.outbox:
            message = self.runtime.outbox.popleft()
            for client in list(self._clients.values()):
                self._send(client, message)
        records = self.runtime.snapshot_records()
        stats = info.step_stats(self.runtime, records, self.runtime.clock())
        last_seq = records[-1][R_SEQ] if records else 0
        for client in list(self._clients.values()):
            if client.steps:
                self._send_steps(client, records, stats)
            self._send(client, protocol.Bye(type=protocol.BYE, t=round(time.time(), 4), last_seq=last_seq,
                                            reason=self._stop_reason))


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
