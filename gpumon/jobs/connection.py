"""Connecting to a job's hook: the one connect, peer check, line reader and hello check every client goes through.

JobClient (the monitor's streaming client), discovery (read the hello, hang up) and HookConnection (the small
blocking client of tests, scripts and benchmarks) all connect with open_hook() and read with a LineReader.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from gpumon import protocol
from gpumon.jobs.peers import check_hello_claims, check_server, socket_claim
from gpumon.printable import printable

CAP_SYS_PTRACE = 19
"""The capability bit that lets a process read other users' processes (py-spy needs it too)."""


def privileged() -> bool:
    """Root, or a process with CAP_SYS_PTRACE: it may read other users' jobs, as it may py-spy them."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as stream:
            for line in stream:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError, IndexError):
        return False
    return False


def peer_readable(peer_uid: int) -> bool:
    """Whether we may read a hook of `peer_uid`'s: our own uid or root's; any uid when privileged."""
    return protocol.peer_allowed(peer_uid) or privileged()


class HookClosed(EOFError):
    """The hook closed the connection (as opposed to a broken one)."""


class LineReader:
    """The messages on a hook connection: one JSON object per line, at most protocol.MAX_MESSAGE bytes each."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()

    def read(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message, or None when `timeout` seconds (None: no limit) pass without a complete line.

        EOFError: the connection broke (HookClosed: the hook closed it), or a line outgrew MAX_MESSAGE (the
        stream cannot resynchronize). protocol.ProtocolError: a malformed line, consumed (the next read goes on).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                return protocol.decode(line, limit=protocol.MAX_MESSAGE)
            if len(self._buffer) > protocol.MAX_MESSAGE:
                self._buffer.clear()
                raise EOFError(f"a message longer than {protocol.MAX_MESSAGE} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                self.sock.settimeout(left)
                chunk = self.sock.recv(65536)
            except (TimeoutError, BlockingIOError, InterruptedError):
                return None
            except OSError as error:
                raise EOFError(f"connection lost: {error.strerror or error}") from None
            if not chunk:
                raise HookClosed("the hook closed the connection")
            self._buffer += chunk


def check_hello(message: dict[str, Any], path: str) -> protocol.Hello:
    """`message` as the hello it must be, in our protocol version (ProtocolError otherwise)."""
    if message.get("type") == protocol.ERROR:  # e.g. too many clients: the hook's own words say why
        said = printable(" ".join(str(message.get("message") or "").split())[:300]) or "no reason given"
        raise protocol.ProtocolError(f"{path} refused the connection: {said} ({printable(str(message.get('code')))})")
    if message.get("type") != protocol.HELLO:
        raise protocol.ProtocolError(f"{path} sent {message.get('type')!r} instead of a hello")
    if message.get("protocol") != protocol.PROTOCOL_VERSION:
        raise protocol.ProtocolError(
            f"{path} speaks gpumon protocol {message.get('protocol')}, this gpumon speaks "
            f"{protocol.PROTOCOL_VERSION}: use the same gpumon version on both sides"
        )
    return message  # type: ignore[return-value]  # checked above: protocol.decode validated its fields


CONNECT_RETRY_FIRST_S = 0.02
"""The first wait after a connect refused with EAGAIN (the hook's listen backlog full, e.g. under a flood)."""


def _connect(sock: socket.socket, path: str, deadline: float) -> None:
    """connect, retried with a doubling wait while the backlog is full (EAGAIN), until `deadline`."""
    wait = CONNECT_RETRY_FIRST_S
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{path} is too busy to accept a connection (its backlog stayed full)") from None
            time.sleep(min(wait, left))
            wait *= 2


def open_hook(path: str, timeout: float) -> tuple[socket.socket, LineReader, protocol.Hello]:
    """Connect to the hook at `path`, check who serves it, read and check its hello, all within `timeout` seconds.

    The socket speaks only for the process its name gives, and only when its directory, the file, the server
    (SO_PEERCRED) and that process all belong to one uid and the server is that process (gpumon.jobs.peers); the
    hello's pid and uid must say the same. Raises OSError when it cannot be reached (FileNotFoundError: no socket;
    ConnectionRefusedError: nobody serves it or its process is gone; TimeoutError when the connect or the hello took
    too long), peers.UntrustedHook (a ProtocolError) when it may not speak for the process it names,
    protocol.ProtocolError when it is not one we may read or speaks something else, EOFError when it hung up before
    its hello.
    """
    deadline = time.monotonic() + timeout
    claim = socket_claim(path)
    if not peer_readable(claim.owner):
        raise protocol.ProtocolError(f"{path} belongs to uid {claim.owner}, not to us or root")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        _connect(sock, path, deadline)
        server_pid = check_server(sock, path, claim)
        reader = LineReader(sock)
        hello = reader.read(max(0.0, deadline - time.monotonic()))
        if hello is None:
            raise TimeoutError(f"{path} sent no hello within {timeout:g} s")
        return sock, reader, check_hello_claims(check_hello(hello, path), path, server_pid, claim)
    except BaseException:
        sock.close()
        raise


class HookConnection:
    """One blocking connection to a job's hook (tests, scripts, benchmarks): the hello, then requests and lines.

    Raises what open_hook raises (ProtocolError for another protocol version or a peer we may not read).
    """

    def __init__(self, target: int | str, timeout: float = 2.0) -> None:
        self.path = protocol.socket_path(target) if isinstance(target, int) else target
        self.sock, self._reader, self.hello = open_hook(self.path, timeout)

    def send(self, msg: protocol.Message) -> None:
        """Send one request to the hook."""
        self.sock.settimeout(None)
        self.sock.sendall(protocol.encode(msg))

    def recv(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message, or None when `timeout` passes first. Raises EOFError when the hook closed."""
        return self._reader.read(timeout)

    def messages(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """Messages until the hook closes or `timeout` seconds pass without one."""
        while True:
            try:
                msg = self.recv(timeout)
            except EOFError:
                return
            if msg is None:
                return
            yield msg

    def request(self, msg: protocol.Message, reply_types: tuple[str, ...], timeout: float = 5.0) -> dict[str, Any]:
        """Send `msg` and return its reply: one of `reply_types` or an `error`, carrying msg's `id` when it
        has one. Streamed messages read meanwhile are skipped."""
        self.send(msg)
        request_id = msg.get("id")
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = self.recv(left)
            if reply is None or (reply["type"] not in reply_types and reply["type"] != protocol.ERROR):
                continue
            if request_id is None or reply.get("id") == request_id:
                return reply
        raise TimeoutError(f"no {'/'.join(reply_types)} reply within {timeout} s")

    def close(self) -> None:
        """Hang up."""
        self.sock.close()

    def __enter__(self) -> HookConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
