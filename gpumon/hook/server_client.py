"""One client connection of the hook's server: its subscription, budgets and bounded output queue."""

from __future__ import annotations

import socket
from collections import deque
from itertools import islice

from gpumon.hook.ratelimit import TokenBucket
from gpumon.protocol import BACKLOG_MAX

STEPS_INTERVAL = 0.2
STATE_INTERVAL = 1.0
INPUT_RATE = 16 * 1024
INPUT_BURST = 128 * 1024
"""Bytes a second one client may send, and at once (two longest lines). Beyond: its socket is not read for a while."""
REQUEST_RATE = 50.0
REQUEST_BURST = 100.0
"""Requests (lines) a second one client may send, and at once."""
REPLAY_BURST = BACKLOG_MAX
REPLAY_RATE = BACKLOG_MAX / 10
"""Step records one client may have sent again by `subscribe` backlogs, at once and a second."""
CPU_SHARE = 0.01
CPU_BURST = 0.02
"""The server thread's CPU one client's requests and streams may use: share of a core, and seconds at once. In debt,
its socket is not read and its streams wait until it has CPU_RESUME again."""
CPU_RESUME = 0.002
MAX_SEND_BUFFERS = 64
"""Queued messages handed to the kernel in one sendmsg call, at most."""
STREAM_RESERVE = 0.001
"""CPU seconds of a client's budget its streams leave to its requests: a subscriber to a fast job, whose `steps`
would spend all of its budget, still gets its pings, knob changes and states answered."""


class Client:
    """A connected client. The server's thread is the only one that touches it."""

    __slots__ = (
        "closed",
        "cpu",
        "cursor",
        "dropped_messages",
        "errors",
        "events",
        "fd",
        "head_sent",
        "inbuf",
        "input_bytes",
        "last_progress",
        "last_steps_sent",
        "next_state",
        "next_steps",
        "out",
        "out_bytes",
        "paused_until",
        "replay_until",
        "replays",
        "requests",
        "sock",
        "state",
        "state_interval",
        "steps",
        "steps_interval",
    )

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
        """The last step record sent to this client (its next `steps` starts after it)."""
        self.replay_until = cursor
        """The newest record of a backlog it asked for: those are all sent; beyond them, a client that falls behind
        the job gets the newest records (the others counted as dropped), so its stream stays current."""
        self.closed = False
        self.events = 0
        """The selector events registered now (0: not registered)."""
        self.paused_until = 0.0
        """While nonzero, the socket is not read (input over budget) until this monotonic time."""
        self.input_bytes = TokenBucket(INPUT_RATE, INPUT_BURST, now)
        self.requests = TokenBucket(REQUEST_RATE, REQUEST_BURST, now)
        self.replays = TokenBucket(REPLAY_RATE, REPLAY_BURST, now)
        self.cpu = TokenBucket(CPU_SHARE, CPU_BURST, now)

    def queue(self, data: bytes, cap: int, now: float) -> None:
        """Queue `data`, dropping the oldest queued messages beyond `cap` bytes (never the one being sent, never the
        newest: memory stays within the cap plus one message)."""
        if not self.out:
            self.last_progress = now
        self.out.append(data)
        self.out_bytes += len(data)
        first_droppable = 1 if self.head_sent else 0
        while self.out_bytes > cap and len(self.out) > first_droppable + 1:
            old = self.out[first_droppable]
            del self.out[first_droppable]
            self.out_bytes -= len(old)
            self.dropped_messages += 1

    def send_queued(self, now: float) -> int:
        """Send what the socket takes now without waiting, the queued messages together (one sendmsg call while the
        socket takes all it is given). Returns how many calls it made, negated when the connection failed."""
        calls = 0
        while self.out:
            buffers: list[bytes | memoryview] = [memoryview(self.out[0])[self.head_sent :]]
            buffers += islice(self.out, 1, MAX_SEND_BUFFERS)
            offered = sum(len(buffer) for buffer in buffers)
            calls += 1
            try:
                sent = self.sock.sendmsg(buffers)
            except (BlockingIOError, InterruptedError):
                return calls
            except OSError:
                return -calls
            self.last_progress = now
            left = sent
            while left:
                head_left = len(self.out[0]) - self.head_sent
                if left < head_left:
                    self.head_sent += left
                    break
                left -= head_left
                self.out_bytes -= len(self.out.popleft())
                self.head_sent = 0
            if sent < offered:
                return calls  # the socket's buffer is full: the rest once it is writable
        return calls
