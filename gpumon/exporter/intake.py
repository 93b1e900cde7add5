"""The /metrics server's front door: one thread accepts, runs TLS handshakes without blocking and reads each request's
head, within deadlines and caps per peer address; a complete head goes to a few answering threads."""

from __future__ import annotations

import errno
import heapq
import itertools
import queue
import re
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

HANDSHAKE_TIMEOUT = 5.0
"""Seconds from accept to a finished TLS handshake."""
HEAD_TIMEOUT = 10.0
"""Seconds from accept to the whole request line and headers (the handshake included)."""
MAX_HEAD_BYTES = 16 * 1024
"""The request line and headers together (a scrape's are under 1 KiB); more is answered 431."""
MAX_HEADER_LINES = 64
"""Header lines at most (a scrape sends about 6); more is answered 431."""
MAX_PER_PEER = 128
"""Connections open at once from one address. A newcomer beyond it takes the place of that address's oldest
connection still sending its head (one that has sent nothing first); when all are being answered, it is closed."""
MAX_PENDING = 512
"""Connections handshaking or sending their head at once, every address together; a newcomer beyond it takes the
place of one of the address holding the most."""
ANSWER_THREADS = 4
MAX_QUEUED = 32
"""Complete requests waiting for an answering thread; beyond it a request is answered 503."""
ANSWER_TIMEOUT = 10.0
"""Seconds an answer's write may block on a client that does not read."""
ACCEPT_PAUSE = 0.1
"""Seconds accepting rests when the process has no file descriptor left and no pending connection to close."""
_ACCEPTS_PER_ROUND = 64
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

Answer = Callable[[socket.socket, bytes, Any], None]
"""Answers one request: the socket (blocking, with ANSWER_TIMEOUT), its head's bytes, the client's address."""


@dataclass(eq=False, slots=True)
class _Pending:
    """A connection still handshaking or sending its head."""

    sock: socket.socket
    """An ssl.SSLSocket with TLS."""
    peer: str
    address: Any
    handshaking: bool
    head: bytearray = field(default_factory=bytearray)
    heard: bool = False
    """Something came in (a byte of a handshake or a head): evicted after those that sent nothing."""
    waiting: bool = True
    """Still handshaking or sending its head (False once handed on or closed)."""
    events: int = selectors.EVENT_READ


def status_line(code: int, reason: str) -> bytes:
    return f"HTTP/1.0 {code} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode("ascii")


TOO_LARGE = status_line(431, "Request Header Fields Too Large")
BUSY = status_line(503, "Service Unavailable")


class Intake:
    """Runs `serve()` on its own thread: accepts on `listener`, handshakes (with `tls`) and reads heads, and calls
    `answer` on one of ANSWER_THREADS threads for each complete request."""

    def __init__(self, listener: socket.socket, tls: ssl.SSLContext | None, answer: Answer) -> None:
        listener.setblocking(False)
        self._listener = listener
        self._tls = tls
        self._answer = answer
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._stopping = False
        self._waiting_by_peer: dict[str, dict[_Pending, None]] = {}  # oldest first
        self._waiting_count = 0
        self._open_by_peer: dict[str, int] = {}
        self._answered: deque[str] = deque()  # peers of answered connections, from the answering threads
        self._deadlines: list[tuple[float, int, bool, _Pending]] = []  # (when, order, handshake only, connection)
        self._order = itertools.count()
        self._accept_resumes: float | None = None
        self._requests: queue.Queue[_Pending | None] = queue.Queue(MAX_QUEUED)
        self._threads = [
            threading.Thread(target=self._answer_requests, name=f"gpumon-exporter-answer-{number}", daemon=True)
            for number in range(ANSWER_THREADS)
        ]

    def stop(self) -> None:
        self._stopping = True
        try:
            self._wake_writer.send(b"x")
        except OSError:
            pass

    def serve(self) -> None:
        for thread in self._threads:
            thread.start()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, self._wake_reader)
        try:
            while not self._stopping:
                for key, _ in self._selector.select(self._timeout(time.monotonic())):
                    if key.data is None:
                        self._accept_some()
                    elif key.data is self._wake_reader:
                        self._drain_wake()
                    else:
                        self._advance(key.data)
                self._expire(time.monotonic())
        finally:
            self._close_all()

    def _timeout(self, now: float) -> float:
        if self._accept_resumes is not None and now >= self._accept_resumes:
            self._accept_resumes = None
            self._selector.register(self._listener, selectors.EVENT_READ, None)
        wake = [1.0]
        if self._deadlines:
            wake.append(self._deadlines[0][0] - now)
        if self._accept_resumes is not None:
            wake.append(self._accept_resumes - now)
        return max(0.0, min(wake))

    def _accept_some(self) -> None:
        for _ in range(_ACCEPTS_PER_ROUND):
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno in _OUT_OF_DESCRIPTORS and not self._evict_from_heaviest():
                    self._selector.unregister(self._listener)
                    self._accept_resumes = time.monotonic() + ACCEPT_PAUSE
                return
            self._admit(sock, address)

    def _admit(self, sock: socket.socket, address: Any) -> None:
        while self._answered:
            self._forget(self._answered.popleft())
        peer = str(address[0])
        if self._open_by_peer.get(peer, 0) >= MAX_PER_PEER and not self._evict(peer):
            sock.close()  # every one of this address's connections is being answered
            return
        if self._waiting_count >= MAX_PENDING:
            self._evict_from_heaviest()
        try:
            sock.setblocking(False)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except OSError:
            sock.close()
            return
        pending = _Pending(sock, peer, address, handshaking=self._tls is not None)
        self._selector.register(sock, selectors.EVENT_READ, pending)
        self._waiting_by_peer.setdefault(peer, {})[pending] = None
        self._waiting_count += 1
        self._open_by_peer[peer] = self._open_by_peer.get(peer, 0) + 1
        now = time.monotonic()
        if pending.handshaking:
            heapq.heappush(self._deadlines, (now + HANDSHAKE_TIMEOUT, next(self._order), True, pending))
        heapq.heappush(self._deadlines, (now + HEAD_TIMEOUT, next(self._order), False, pending))

    def _advance(self, pending: _Pending) -> None:
        """Moves a readable (or writable) connection's handshake and head on as far as its bytes allow."""
        if not pending.waiting:
            return  # closed by an earlier event of the same select (a newcomer took its place)
        pending.heard = True
        try:
            if pending.handshaking:
                cast(ssl.SSLSocket, pending.sock).do_handshake()
                pending.handshaking = False
            while True:
                chunk = pending.sock.recv(MAX_HEAD_BYTES + 1 - len(pending.head))
                if not chunk:
                    self._close(pending)  # gone before its request was in
                    return
                searched_from = max(0, len(pending.head) - 3)
                pending.head += chunk
                end = _HEAD_END.search(pending.head, searched_from)
                head = pending.head if end is None else pending.head[: end.end()]
                if len(head) > MAX_HEAD_BYTES or head.count(b"\n") > MAX_HEADER_LINES + 1:
                    self._refuse(pending, TOO_LARGE)
                    return
                if end is not None:
                    self._hand_on(pending)
                    return
        except ssl.SSLWantWriteError:
            self._listen_for(pending, selectors.EVENT_WRITE)
        except (ssl.SSLWantReadError, BlockingIOError):
            self._listen_for(pending, selectors.EVENT_READ)
        except (OSError, ValueError):  # a failed handshake or a reset costs only this connection
            self._close(pending)

    def _listen_for(self, pending: _Pending, events: int) -> None:
        if pending.events != events:
            pending.events = events
            self._selector.modify(pending.sock, events, pending)

    def _hand_on(self, pending: _Pending) -> None:
        self._stop_waiting(pending)
        try:
            pending.sock.settimeout(ANSWER_TIMEOUT)
            self._requests.put_nowait(pending)
        except queue.Full:
            _send_quietly(pending.sock, BUSY)
            pending.sock.close()
            self._forget(pending.peer)
        except OSError:
            pending.sock.close()
            self._forget(pending.peer)

    def _answer_requests(self) -> None:
        while (pending := self._requests.get()) is not None:
            try:
                self._answer(pending.sock, bytes(pending.head), pending.address)
            except Exception:  # noqa: BLE001 -- a client that goes away mid-answer is not worth a traceback
                pass
            finally:
                pending.sock.close()
                self._answered.append(pending.peer)

    def _expire(self, now: float) -> None:
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, handshake_only, pending = heapq.heappop(self._deadlines)
            if pending.waiting and (pending.handshaking or not handshake_only):
                self._close(pending)

    def _evict(self, peer: str) -> bool:
        """Closes `peer`'s connection that has waited longest, one that sent nothing first; False with none."""
        waiting = self._waiting_by_peer.get(peer)
        if not waiting:
            return False
        victim = next((pending for pending in waiting if not pending.heard), None) or next(iter(waiting))
        self._close(victim)
        return True

    def _evict_from_heaviest(self) -> bool:
        if not self._waiting_by_peer:
            return False
        return self._evict(max(self._waiting_by_peer, key=lambda peer: len(self._waiting_by_peer[peer])))

    def _refuse(self, pending: _Pending, answer: bytes) -> None:
        _send_quietly(pending.sock, answer)
        self._close(pending)

    def _close(self, pending: _Pending) -> None:
        """Closes a waiting connection (once: a connection closed already is left alone)."""
        if pending.waiting:
            self._stop_waiting(pending)
            pending.sock.close()
            self._forget(pending.peer)

    def _stop_waiting(self, pending: _Pending) -> None:
        if not pending.waiting:
            return
        pending.waiting = False
        self._selector.unregister(pending.sock)
        waiting = self._waiting_by_peer[pending.peer]
        del waiting[pending]
        if not waiting:
            del self._waiting_by_peer[pending.peer]
        self._waiting_count -= 1

    def _forget(self, peer: str) -> None:
        """One connection of `peer` fewer."""
        left = self._open_by_peer[peer] - 1
        if left:
            self._open_by_peer[peer] = left
        else:
            del self._open_by_peer[peer]

    def _drain_wake(self) -> None:
        try:
            while self._wake_reader.recv(64):
                pass
        except OSError:
            pass

    def _close_all(self) -> None:
        for waiting in list(self._waiting_by_peer.values()):
            for pending in list(waiting):
                self._close(pending)
        for _ in self._threads:
            try:
                self._requests.put_nowait(None)
            except queue.Full:
                break  # the threads are daemons: they go with the process
        self._selector.close()
        self._wake_reader.close()
        self._wake_writer.close()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except (OSError, ValueError):
        pass
