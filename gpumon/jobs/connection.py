"""HookConnection: one blocking connection to a job's hook (tests, scripts, benchmarks)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

from gpumon.protocol import (ERROR, E_LINE_TOO_LONG, HELLO, MAX_MESSAGE, PROTOCOL_VERSION, Hello, Message,
                             ProtocolError, decode, encode, peer_allowed, peer_credentials, socket_path)


class HookConnection:
    """One blocking connection to a job's hook: reads the hello, then sends requests and reads lines.

    Raises ProtocolError when the peer speaks another protocol version or is not our uid or root,
    OSError when the socket cannot be reached.
    """

    def __init__(self, target: int | str, timeout: float = 2.0) -> None:
        path = socket_path(target) if isinstance(target, int) else target
        self.path = path
        self._buffer = bytearray()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            _pid, uid, _gid = peer_credentials(self.sock)
            if not peer_allowed(uid):
                raise ProtocolError(f"{path} is served by uid {uid}, not by us or root")
            hello = self.recv(timeout)
            if hello is None or hello.get("type") != HELLO:
                raise ProtocolError(f"{path} did not send a hello")
            if hello.get("protocol") != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"the job speaks gpumon protocol {hello.get('protocol')}, this gpumon speaks {PROTOCOL_VERSION}:"
                    " use the same gpumon version on both sides")
        except BaseException:
            self.sock.close()
            raise
        self.hello: Hello = hello  # type: ignore[assignment]

    def send(self, msg: Message) -> None:
        self.sock.sendall(encode(msg))

    def recv(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message, or None when `timeout` passes first. Raises EOFError when the hook closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                return decode(line)
            if len(self._buffer) > MAX_MESSAGE:
                raise ProtocolError("message longer than MAX_MESSAGE", E_LINE_TOO_LONG)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, BlockingIOError):
                return None
            if not chunk:
                raise EOFError("the hook closed the connection")
            self._buffer += chunk

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

    def request(self, msg: Message, reply_types: tuple[str, ...], timeout: float = 5.0) -> dict[str, Any]:
        """Send `msg` and return its reply: one of `reply_types` or an `error`, carrying msg's `id` when it
        has one. Streamed messages read meanwhile are skipped."""
        self.send(msg)
        request_id = msg.get("id")
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = self.recv(left)
            if reply is None or (reply["type"] not in reply_types and reply["type"] != ERROR):
                continue
            if request_id is None or reply.get("id") == request_id:
                return reply
        raise TimeoutError(f"no {'/'.join(reply_types)} reply within {timeout} s")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> HookConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
