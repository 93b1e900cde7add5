"""The hook's Unix socket server: a daemon thread that streams steps and state to a few local clients.

Never blocks the training thread (it only reads the runtime's bounded structures and queues requests
in `runtime.control`), never waits for a client (non-blocking sockets, a bounded outgoing buffer per
client whose oldest messages are dropped), and no client can make it cost the job much: accepts and
each client's input have a budget (token buckets; over it, the server stops listening or reading for a
while and lets the kernel push back), so do each client's share of the thread's cost and the thread's cost as
a whole (its CPU, measured with time.thread_time, plus HANDOFF_COST for each call that gives the GIL up; over it,
the client, or the whole server, waits), the loop takes its turns at most every TURN_S (what arrives meanwhile is
taken in one go: a bounded number of wakeups, and of GIL handoffs with the training thread, a second), each client
gets at most one send a turn, the subscribed streams fall due together (on a STREAM_GRID), a new client gets a
greeting built at most every GREETING_TTL, each step record is encoded once for every client, and nothing a
client sends can end the thread (a failing connection is dropped; a failing loop is restarted with backoff and
counted in state.hook.server_restarts).

Why the calls count and not only the CPU: the thread gives the GIL up for every call that may block (select,
recv, send, epoll_ctl, accept, close, a wait) and must take it back from the training thread afterwards. The
training thread then waits for it, and wakes up late once it is given back: time the job loses that the server
thread's CPU clock does not show (benchmarks/hook_flood.py measures it: on the 2-core VM 10-45 us a handoff, and
a send for each reply made hundreds a second under a flood). So the server's loop wakes up a bounded number of
times a second, batches its sends, and charges each such call to the budgets. What the server runs meanwhile it
runs holding the GIL, which a launch-bound training thread needs nearly all the time: the job loses about the
server's whole cost, so its budget is below what a flood may cost the job.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import threading
import time
from typing import Any

from gpumon import protocol
from gpumon.hook import info
from gpumon.hook.ratelimit import TokenBucket
from gpumon.hook.request_handler import RequestError, RequestHandler
from gpumon.hook.runtime import R_SEQ, HookRuntime
from gpumon.hook.server_client import CPU_RESUME, STREAM_RESERVE, Client
from gpumon.hook.socket_dir import choose_socket_dir, prepare_socket_dir
from gpumon.hook.steps_lines import StepsLines

MAX_CLIENTS = 8
SERVER_CPU_SHARE = 0.015
SERVER_CPU_BURST = 0.02
"""The server thread's cost (its CPU and its handoffs), whatever the clients do: share of a core, and seconds at once.
In debt, the whole server (accepts, reads, streams) waits until it has SERVER_CPU_RESUME again; the kernel holds what
clients send. A launch-bound training thread loses about what the server costs (it waits for the GIL while the server
holds it: benchmarks/README.md, "GIL handoffs"), so the share is below the 2% a flood may cost the job."""
SERVER_CPU_RESUME = 0.005
STREAM_BATCH = 0.004
"""Streams held back by a budget (the client's or the server's) wait until this much CPU beyond its reserve is back:
a backlog replay then goes out a few lines a turn, not one line a wakeup (each wakeup a GIL handoff the job pays)."""
SERVER_STREAM_RESERVE = 0.003
"""CPU seconds of the server's budget that the streams leave to greetings and requests: subscribers to a fast job
(whose `steps` cost milliseconds each) cannot keep a new client from its hello and first answer. Below
SERVER_CPU_RESUME, so that after a debt the streams still go first."""
MAX_ID_BYTES = 256
MAX_REQUEST_CONTAINERS = 256
"""A request line with more `[` and `{` than this is refused before parsing: thousands of lists cost a collection."""
"""Longest request `id`, as JSON. A longer one (or one with NaN or infinity) gets `error` `bad_message`, without it."""
STATS_TTL = 0.2
"""The step stats sent with `steps` are reused for this long (they cover the last 5 s)."""
CLIENT_BUFFER = 1024 * 1024
"""Bytes queued for one client before its oldest messages are dropped."""
STALL_TIMEOUT = 20.0
"""A client with queued output that has taken nothing for this long is disconnected."""
MAX_CLIENT_ERRORS = 32
DEFAULT_BACKLOG = 256
STEPS_HEARTBEAT = 1.0
"""A `steps` message goes out at least this often (fresh stats) even without new steps."""
ACCEPT_RATE = 10.0
ACCEPT_BURST = 20.0
"""Connections greeted per second, and how many may come at once. Beyond: closed unread, listening paused."""
ACCEPT_PAUSE_MIN = 0.05
ACCEPT_PAUSE_MAX = 1.0
"""Listening pauses at least this long when over the rate, doubling while the flood goes on, up to the max."""
GREETING_TTL = 0.2
"""A new client's hello, state and first steps are reused for this long (a flood of connects costs one build)."""
RESTART_BACKOFF_MIN = 0.05
RESTART_BACKOFF_MAX = 5.0
_RESTART_CALM_S = 60.0
"""A loop that ran this long without failing starts its backoff from the minimum again."""
TURN_S = 0.02
"""A turn of the loop (the due streams, every ready socket, then at most one send for each client with output)
begins at least this long after the one before, whatever the clients do: at most 50 turns a second, each one or two
wakeups of the thread. A request waits at most this long more for its answer."""
HANDOFF_COST = 100e-6
"""Seconds charged to the budgets for each call that gives the GIL up (see the module's docstring). On the 2-core VM
a wait for the GIL costs the training thread 25-45 us, and a wakeup of another thread 10-20 us (benchmarks/README.md,
"GIL handoffs"): charged generously, for slower machines. With the server's budget (SERVER_CPU_SHARE), at most 150
such calls a second, fewer the more CPU they cost."""
STREAM_GRID = 0.05
"""The subscribed streams' next times are rounded to a multiple of this (the shortest steps_interval), so that every
subscriber due about then is served in the same turn."""
_RECV_CHUNK = 65536
_MAX_RECV_PER_TURN = 1
_MAX_ACCEPT_PER_TURN = 16
_MAX_WAKE_READS = 4

__all__ = ["HookServer", "prepare_socket_dir"]


class HookServer:
    """Serves one process's socket. `start()` returns False when it cannot, with why in `failure`.

    directory: serve there or nowhere (tests). Default: the first safe one of `directories` (default
    protocol.fixed_socket_dirs(), the order discovery searches), else a private directory under
    `private_base`; what was refused on the way is in `socket_refused` (and in hello and state).
    """

    def __init__(
        self,
        runtime: HookRuntime,
        *,
        directory: str | None = None,
        installed_at: float | None = None,
        injected: bool = False,
        max_clients: int = MAX_CLIENTS,
        client_buffer: int = CLIENT_BUFFER,
        stall_timeout: float = STALL_TIMEOUT,
        directories: list[str] | None = None,
        private_base: str | None = protocol.PRIVATE_DIR_BASE,
    ) -> None:
        self.runtime = runtime
        self._fixed_directory = directory
        self._directories = directories
        self._private_base = private_base
        self.directory = directory or protocol.socket_dir()
        self.path = os.path.join(self.directory, f"{os.getpid()}.sock")
        self.installed_at = time.time() if installed_at is None else installed_at
        self.injected = injected
        self.max_clients = max_clients
        self.client_buffer = client_buffer
        self.stall_timeout = stall_timeout
        self.owner_pid = os.getpid()
        self.failure: str | None = None
        self.socket_refused: str | None = None
        self.restarts = 0
        self._clients: dict[int, Client] = {}
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake_r = self._wake_w = -1
        self._inode: int | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_event = threading.Event()
        self._stop_reason = "exit"
        self._cleaned = False
        self._accepts = TokenBucket(ACCEPT_RATE, ACCEPT_BURST, time.monotonic())
        self._accept_resume_at: float | None = None
        self._accept_resumed_at = 0.0
        self._accept_pause = ACCEPT_PAUSE_MIN
        self._greeting: tuple[float, list[bytes], int] | None = None
        self._cpu = TokenBucket(SERVER_CPU_SHARE, SERVER_CPU_BURST, time.monotonic())
        self._cpu_mark = 0.0
        self._calls = 0
        """Calls that gave the GIL up since the last charge."""
        self._next_turn = 0.0
        self._unsent: dict[int, Client] = {}
        """Clients with output queued this turn: sent to once, at the turn's end."""
        self.turns = 0
        """Turns of the loop so far (each begins at least TURN_S after the one before)."""
        self.wakeups = 0
        """Calls that may have put the thread to sleep (select with a timeout, waits): its wakeups are at most these."""
        self.handoffs = 0
        """Calls that gave the GIL up (each charged HANDOFF_COST), the wakeups among them."""
        self._steps_lines = StepsLines(runtime)
        self._stats: tuple[float, bytes] | None = None
        self._turn = 0
        self._requests = RequestHandler(runtime, self._state, lambda: self.directory)
        self._too_many_clients = protocol.encode(
            protocol.error_message(protocol.E_TOO_MANY_CLIENTS, f"at most {max_clients} clients at a time")
        )

    @property
    def clients(self) -> int:
        """How many clients are connected."""
        return len(self._clients)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> bool:
        """Listen in the chosen socket directory and start the server thread; False (why: `failure`) if not."""
        if not self._choose_directory():
            return False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound under a name no scan reads and renamed into place once listening: a scan that found the socket in
        # the moment between bind and listen had its connection refused and removed it as stale.
        binding = _binding_path(self.path)
        try:
            for name in (binding, self.path):
                if os.path.lexists(name):
                    os.unlink(name)  # our pid's names: left by a dead process with the same pid
            listener.bind(binding)
            os.chmod(binding, 0o600)
            listener.listen(16)
            os.rename(binding, self.path)
            self._inode = os.lstat(self.path).st_ino
            listener.setblocking(False)
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
            self._listener = listener
            self._selector = self._new_selector()
        except OSError as exc:
            self.failure = f"cannot serve {self.path}: {exc.strerror or exc}"
            self._listener = None
            listener.close()
            self._close_pipe()
            self._unlink()
            try:
                os.unlink(binding)
            except OSError:
                pass
            return False
        self._thread = threading.Thread(target=self._run, name="gpumon-hook-server", daemon=True)
        self._thread.start()
        return True

    def _choose_directory(self) -> bool:
        if self._fixed_directory is not None:
            directory, refused = self._fixed_directory, list[str]()
            reason = prepare_socket_dir(directory)
            if reason is not None:
                self.failure = reason
                return False
        else:
            candidates = protocol.fixed_socket_dirs() if self._directories is None else self._directories
            private_base = None if os.environ.get(protocol.SOCKET_DIR_ENV) else self._private_base
            chosen, refused = choose_socket_dir(candidates, private_base=private_base)
            if chosen is None:
                env_dir = os.environ.get(protocol.SOCKET_DIR_ENV)
                # choose_socket_dir skips a place it cannot create quietly; the user's own choice says why
                reason = "; ".join(refused) or (env_dir and prepare_socket_dir(env_dir)) or "no usable socket directory"
                self.failure = f"{protocol.SOCKET_DIR_ENV}: {reason}" if env_dir else reason
                return False
            directory = chosen
        self.socket_refused = "; ".join(refused) or None
        self.directory = directory
        self.path = os.path.join(directory, f"{os.getpid()}.sock")
        return True

    def stop(self, reason: str = "exit", timeout: float = 0.5) -> None:
        """Send `bye` (best effort), close every connection and remove the socket. Owner process only."""
        if os.getpid() != self.owner_pid or self._thread is None:
            return
        self._stop_reason = reason
        self._stopping = True
        self._stop_event.set()
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
            except Exception:  # noqa: BLE001 - a broken selector copy in a child is nothing to report
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
            except Exception:  # noqa: BLE001 - closing at exit: nothing left to do about it
                pass
        if self._listener is not None:
            _close_quietly(self._listener)
        self._close_pipe()

    def _new_selector(self) -> selectors.BaseSelector:
        """A selector with the listener (unless accepting is paused), the wake pipe and every client registered."""
        selector = selectors.DefaultSelector()
        if self._listener is not None and self._accept_resume_at is None:
            selector.register(self._listener, selectors.EVENT_READ, "listen")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        for client in list(self._clients.values()):
            if client.events:
                try:
                    selector.register(client.sock, client.events, client)
                except (KeyError, ValueError, OSError):
                    client.events = 0
                    self._drop(client)
        return selector

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        self._cpu_mark = time.thread_time()
        backoff = RESTART_BACKOFF_MIN
        while not self._stopping:
            began = time.monotonic()
            try:
                while not self._stopping:
                    self._serve_once()
            except Exception as exc:  # noqa: BLE001 - nothing may end this thread: count, back off, restart
                self.runtime.error(exc)
                if self._stop_event.is_set():
                    break
                self.restarts += 1
                if time.monotonic() - began > _RESTART_CALM_S:
                    backoff = RESTART_BACKOFF_MIN
                self._stop_event.wait(backoff)
                backoff = min(RESTART_BACKOFF_MAX, backoff * 2)
                self._restart()
        for last_words in (self._say_goodbye, self._cleanup):
            try:
                last_words()
            except Exception as exc:  # noqa: BLE001 - never out of this thread
                self.runtime.error(exc)

    def _restart(self) -> None:
        """A fresh selector (the old one may be what failed); the listener and the clients stay."""
        old = self._selector
        try:
            self._selector = self._new_selector()
        except Exception as exc:  # noqa: BLE001 - the next loop fails again and backs off further
            self.runtime.error(exc)
            return
        if old is not None:
            try:
                old.close()
            except Exception:  # noqa: BLE001 - the broken selector is dropped either way
                pass

    def _serve_once(self) -> None:
        """One turn: wait for a socket or a due stream (or, in debt, for budget), no sooner than TURN_S after the last
        turn began; then the streams, every ready socket, and one send for each client with output."""
        selector = self._selector
        assert selector is not None
        self._charge(None)
        now = time.monotonic()
        if self._cpu.wait_s(now, 0.0) > 0:
            self._sleep(self._cpu.wait_s(now, SERVER_CPU_RESUME))
            return
        events = self._select(selector, self._timeout(now))
        now = time.monotonic()
        if now < self._next_turn and not self._stopping:
            # Too soon after the last turn: let what else comes gather for the rest of it, then take it all at once.
            self._sleep(self._next_turn - now)
            events = self._select(selector, 0.0)
            now = time.monotonic()
        self._next_turn = now + TURN_S
        self.turns += 1
        try:
            self._tick(now)  # the subscribed streams first: a flood of requests cannot starve them
            self._turn += 1  # who goes first changes every time: with little budget left, no client always takes it
            first = self._turn % len(events) if events else 0
            for key, mask in events[first:] + events[:first]:
                if self._stopping or self._over_budget(None):
                    return
                if key.data == "listen":
                    self._accept()
                elif key.data == "wake":
                    self._drain_wake_pipe()
                else:
                    client = key.data
                    self._charge(None)
                    try:
                        if mask & selectors.EVENT_READ and not client.closed:
                            self._read(client)
                        if mask & selectors.EVENT_WRITE and not client.closed:
                            self._flush(client)
                    except Exception as exc:  # noqa: BLE001 - one connection's failure never reaches the others
                        self._client_failed(client, exc)
                    self._charge(client)
        finally:
            self._send_unsent()

    def _select(self, selector: selectors.BaseSelector, timeout: float | None) -> list[Any]:
        self._calls += 1
        if timeout is None or timeout > 0:
            self.wakeups += 1
        return selector.select(timeout)

    def _sleep(self, seconds: float) -> None:
        """Wait (stop() ends the wait), counted as a wakeup and a handoff."""
        self._calls += 1
        self.wakeups += 1
        self._stop_event.wait(seconds)

    def _drain_wake_pipe(self) -> None:
        for _ in range(_MAX_WAKE_READS):
            self._calls += 1
            try:
                if not os.read(self._wake_r, 4096):
                    return
            except OSError:
                return

    def _send_unsent(self) -> None:
        """The turn's end: one send for each client with output queued during it."""
        while self._unsent:
            _fd, client = self._unsent.popitem()
            try:
                self._flush(client)
            except Exception as exc:  # noqa: BLE001 - one connection's failure never reaches the others
                self._client_failed(client, exc)
            self._charge(client)

    def _charge(self, client: Client | None) -> None:
        """Charge the thread's cost since the last charge (its CPU, and HANDOFF_COST for each call that gave the GIL
        up) to the server's budget, and to `client`'s when given."""
        mark = time.thread_time()
        spent, self._cpu_mark = mark - self._cpu_mark + self._calls * HANDOFF_COST, mark
        self.handoffs += self._calls
        self._calls = 0
        now = time.monotonic()
        self._cpu.spend(now, spent)
        if client is not None:
            client.cpu.spend(now, spent)

    def _over_budget(self, client: Client | None, reserve: float = 0.0) -> bool:
        """The server, or `client`, has spent its CPU budget (both counted up to the last charge); with `reserve`,
        `client` counts as spent once less than that is left."""
        now = time.monotonic()
        return self._cpu.wait_s(now, 0.0) > 0 or (client is not None and client.cpu.wait_s(now, reserve) > 0)

    def _may_stream(self, client: Client, now: float | None = None) -> bool:
        """A client's streams go on while it has more than STREAM_RESERVE of its budget and the server more than
        SERVER_STREAM_RESERVE of its own: the rest is for requests and new clients."""
        now = time.monotonic() if now is None else now
        return self._cpu.wait_s(now, SERVER_STREAM_RESERVE) <= 0 and client.cpu.wait_s(now, STREAM_RESERVE) <= 0

    def _stream_ready_at(self, client: Client, now: float) -> float:
        """When the loop wakes for `client`'s streams: they may go on (see _may_stream) now; once held back by a
        budget, when STREAM_BATCH more than its reserve is back, so that what waits goes out in a few turns rather
        than a line a wakeup."""
        if self._may_stream(client, now):
            return now
        client_wait = client.cpu.wait_s(now, STREAM_RESERVE + STREAM_BATCH)
        return now + max(client_wait, self._cpu.wait_s(now, SERVER_STREAM_RESERVE + STREAM_BATCH))

    def _budget_resumes_at(self, client: Client, now: float) -> float:
        """When `client` may be served again: both its budget and the server's have some CPU back."""
        return now + max(client.cpu.wait_s(now, CPU_RESUME), self._cpu.wait_s(now, SERVER_CPU_RESUME))

    def _timeout(self, now: float) -> float | None:
        due = [self._accept_resume_at] if self._accept_resume_at is not None else []
        if not self._clients and not due:
            return None
        for client in self._clients.values():
            ready = self._stream_ready_at(client, now)
            if client.steps:
                due.append(max(ready, client.next_steps))
            if client.state:
                due.append(max(ready, client.next_state))
            if client.paused_until:  # read again once the pause is over and the client has budget (_tick)
                due.append(max(client.paused_until, now + client.cpu.wait_s(now, 0.0)))
        if not due:
            return 1.0  # still wake now and then for the stall check
        return max(0.0, min(min(due) - now, 1.0))

    def _client_failed(self, client: Client, exc: Exception) -> None:
        self.runtime.error(exc)
        try:
            self._drop(client)
        except Exception:  # noqa: BLE001 - forget it even when closing it fails
            client.closed = True
            self._clients.pop(client.fd, None)

    # -- accepting ------------------------------------------------------------------------------

    def _accept(self) -> None:
        listener = self._listener
        assert listener is not None
        for _ in range(_MAX_ACCEPT_PER_TURN):
            self._calls += 1
            try:
                conn, _addr = listener.accept()
            except OSError:  # BlockingIOError: none left
                return
            now = time.monotonic()
            if not self._accepts.take(now):
                self._calls += 1
                _close_quietly(conn)  # over the rate: no peer check, no greeting, and stop listening a while
                self._pause_accepting(now)
                return
            try:
                self._admit(conn, now)
            except Exception as exc:  # noqa: BLE001 - a connection that fails while being admitted is closed
                self.runtime.error(exc)
                client = self._clients.get(conn.fileno()) if conn.fileno() >= 0 else None
                if client is not None:
                    self._client_failed(client, exc)
                else:
                    _close_quietly(conn)

    def _admit(self, conn: socket.socket, now: float) -> None:
        try:
            conn.setblocking(False)
            _pid, uid, _gid = protocol.peer_credentials(conn)
        except OSError:
            _close_quietly(conn)
            return
        if not protocol.peer_allowed(uid):
            _close_quietly(conn)
            return
        if len(self._clients) >= self.max_clients:
            self._reap_hung_up()
        if len(self._clients) >= self.max_clients:
            self._calls += 2
            try:
                conn.send(self._too_many_clients)
            except OSError:
                pass
            _close_quietly(conn)
            return
        greeting, cursor = self._greeting_for_new_client(now)
        client = Client(conn, now, cursor=cursor)
        self._clients[client.fd] = client
        self._update_events(client)
        for data in greeting:
            self._send_bytes(client, data)

    def _reap_hung_up(self) -> None:
        """Drop the clients whose peers have closed but whose end of file the loop has not read yet (a flood's
        connections, admitted in the same turn), so that they do not keep a live client out of a full table."""
        for client in list(self._clients.values()):
            self._calls += 1
            try:
                hung_up = client.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                hung_up = True
            if hung_up:
                self._drop(client)

    def _pause_accepting(self, now: float) -> None:
        if self._accept_resume_at is not None or self._selector is None or self._listener is None:
            return
        flooding = now - self._accept_resumed_at < ACCEPT_PAUSE_MAX  # over the rate again soon after resuming
        self._accept_pause = min(ACCEPT_PAUSE_MAX, self._accept_pause * 2) if flooding else ACCEPT_PAUSE_MIN
        self._accept_resume_at = now + max(self._accept_pause, self._accepts.wait_s(now))
        self._calls += 1
        try:
            self._selector.unregister(self._listener)
        except (KeyError, ValueError, OSError):
            pass

    def _resume_accepting(self, now: float) -> None:
        if self._accept_resume_at is None or now < self._accept_resume_at:
            return
        self._accept_resume_at = None
        self._accept_resumed_at = now
        self._calls += 1
        if self._selector is not None and self._listener is not None:
            self._selector.register(self._listener, selectors.EVENT_READ, "listen")

    def _greeting_for_new_client(self, now: float) -> tuple[list[bytes], int]:
        """hello, state and the last DEFAULT_BACKLOG records, encoded; rebuilt at most every GREETING_TTL.

        Returns the lines and the cursor they leave the client at (its next `steps` starts after it).
        """
        cached = self._greeting
        if cached is not None and now - cached[0] < GREETING_TTL:
            return cached[1], cached[2]
        hello = info.hello(
            self.runtime, started=self.installed_at, injected=self.injected, socket_refused=self.socket_refused
        )
        lines = [protocol.encode(hello), protocol.encode(self._state())]
        records = self.runtime.snapshot_records()
        stats_json = self._stats_json(records, now)
        cursor, more = max(0, self.runtime.seq - DEFAULT_BACKLOG), True
        while more:
            line, cursor, more = self._steps_lines.next_line(cursor, records, stats_json)
            lines.append(line)
        self._greeting = (now, lines, cursor)
        return lines, cursor

    # -- input ----------------------------------------------------------------------------------

    def _read(self, client: Client) -> None:
        for _ in range(_MAX_RECV_PER_TURN):
            if client.paused_until:
                return
            if self._over_budget(client):
                self._pause_input(client, self._budget_resumes_at(client, time.monotonic()))
                return
            self._calls += 1
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
            now = time.monotonic()
            client.input_bytes.spend(now, len(chunk))
            client.inbuf += chunk
            self._handle_lines(client, now)
            if client.closed:
                return
            if client.input_bytes.tokens < 0:
                self._pause_input(client, now + client.input_bytes.wait_s(now, 0.0))
                return

    def _pause_input(self, client: Client, until: float) -> None:
        client.paused_until = max(until, time.monotonic() + 0.001)
        self._update_events(client)

    def _handle_lines(self, client: Client, now: float) -> None:
        buf = client.inbuf
        while not client.closed:
            newline = buf.find(b"\n")
            if (newline < 0 and len(buf) >= protocol.MAX_LINE) or newline + 1 > protocol.MAX_LINE:
                self._refuse(client, protocol.E_LINE_TOO_LONG, f"a request line is at most {protocol.MAX_LINE} bytes")
                return
            if newline < 0:
                return
            if self._over_budget(client):
                self._pause_input(client, self._budget_resumes_at(client, now))
                return
            if not client.requests.take(now):
                self._pause_input(client, now + client.requests.wait_s(now))
                return
            line = bytes(buf[: newline + 1])
            del buf[: newline + 1]
            if line.strip():
                self._handle_request(client, line)
                self._charge(client)

    def _refuse(self, client: Client, code: str, message: str) -> None:
        """Answer with an error and hang up (what is queued gets one chance to go out)."""
        self._send(client, protocol.error_message(code, message))
        self._flush(client)
        self._drop(client)

    def _handle_request(self, client: Client, line: bytes) -> None:
        if line.count(b"[") + line.count(b"{") > MAX_REQUEST_CONTAINERS:
            message = f"more than {MAX_REQUEST_CONTAINERS} arrays and objects in one request"
            self._client_error(client, protocol.E_BAD_MESSAGE, message, None)
            return
        try:
            msg = protocol.decode(line, limit=protocol.MAX_LINE)
        except protocol.ProtocolError as exc:
            self._client_error(client, exc.code, str(exc), exc.request_id)
            return
        request_id = msg.get("id")
        if request_id is not None:
            problem = _id_problem(request_id)
            if problem is not None:
                self._client_error(client, protocol.E_BAD_MESSAGE, problem, None)
                return
        try:
            reply = self._requests.answer(client, msg)
        except RequestError as exc:
            self._client_error(client, exc.code, str(exc), request_id)
            return
        if request_id is not None:
            reply["id"] = request_id
        try:
            data = protocol.encode(reply)
        except protocol.ProtocolError as exc:  # a value from the request that JSON cannot carry back
            self._client_error(client, protocol.E_BAD_MESSAGE, str(exc), request_id)
            return
        self._send_bytes(client, data)

    def _client_error(self, client: Client, code: str, message: str, request_id: Any) -> None:
        client.errors += 1
        if client.errors > MAX_CLIENT_ERRORS:
            self._refuse(client, protocol.E_TOO_MANY_ERRORS, f"more than {MAX_CLIENT_ERRORS} bad requests")
            return
        self._send(client, protocol.error_message(code, message, request_id))

    # -- output ---------------------------------------------------------------------------------

    def _state(self) -> protocol.State:
        return info.state(
            self.runtime,
            clients=len(self._clients),
            installed_at=self.installed_at,
            server_restarts=self.restarts,
            socket_refused=self.socket_refused,
        )

    def _tick(self, now: float) -> None:
        self._resume_accepting(now)
        outbox = self.runtime.outbox
        while outbox:
            message = outbox.popleft()
            for client in list(self._clients.values()):
                self._send(client, message)
        records: list[list[Any]] | None = None
        state: bytes | None = None
        for client in list(self._clients.values()):
            if client.closed:
                continue
            self._charge(None)
            try:
                if client.out and now - client.last_progress > self.stall_timeout:
                    self._drop(client)
                    continue
                if self._over_budget(client):
                    continue  # its streams wait; _timeout wakes the loop when its budget is back
                if client.steps and now >= client.next_steps and self._may_stream(client):
                    if records is None:
                        records = self.runtime.snapshot_records()
                    self._stream_steps(client, records, now)
                if client.state and now >= client.next_state and self._may_stream(client):
                    client.next_state = _on_grid(now, client.state_interval)
                    if state is None:
                        state = self._encode(self._state())
                    self._send_bytes(client, state)
                if client.paused_until and now >= client.paused_until:  # its requests after its streams
                    client.paused_until = 0.0
                    self._handle_lines(client, now)
                    self._update_events(client)
            except Exception as exc:  # noqa: BLE001 - one connection's failure never reaches the others
                self._client_failed(client, exc)
            self._charge(client)

    def _stream_steps(self, client: Client, records: list[list[Any]], now: float) -> None:
        """A subscriber's `steps` when due: the records new to it (a line at a time while its budget lasts; the rest
        at the next tick), or fresh stats at least every STEPS_HEARTBEAT."""
        last_seq = records[-1][R_SEQ] if records else 0
        if last_seq > client.cursor or now - client.last_steps_sent >= STEPS_HEARTBEAT:
            client.last_steps_sent = now
            if not self._send_steps(client, records, self._stats_json(records, now), budgeted=True):
                return  # more to send: due again as soon as its budget allows
        client.next_steps = _on_grid(now, client.steps_interval)

    def _send_steps(self, client: Client, records: list[list[Any]], stats_json: bytes, *, budgeted: bool) -> bool:
        """Send `client` the `steps` lines after its cursor; budgeted, only while it has budget (past a backlog it
        asked for, the newest records only). True: all sent."""
        while True:
            newest = budgeted and client.cursor >= client.replay_until
            line, client.cursor, more = self._steps_lines.next_line(client.cursor, records, stats_json, newest)
            self._send_bytes(client, line)
            if not more:
                return True
            if budgeted:
                self._charge(client)
                if not self._may_stream(client):
                    return False

    def _stats_json(self, records: list[list[Any]], now: float) -> bytes:
        cached = self._stats
        if cached is None or now - cached[0] >= STATS_TTL:
            cached = self._stats = (now, self._steps_lines.stats_json(records))
        return cached[1]

    def _encode(self, message: Any) -> bytes:
        """The message's line; empty (and the error counted) when it cannot be encoded."""
        try:
            return protocol.encode(message)
        except protocol.ProtocolError as exc:
            self.runtime.error(exc)
            return b""

    def _send(self, client: Client, message: Any) -> None:
        """Queue a message for `client`, dropping its oldest queued ones beyond the buffer cap."""
        if not client.closed:
            self._send_bytes(client, self._encode(message))

    def _send_bytes(self, client: Client, data: bytes) -> None:
        """Queue `data` for `client`: sent with everything else queued for it at the end of the turn."""
        if client.closed or not data:
            return
        client.queue(data, self.client_buffer, time.monotonic())
        self._unsent[client.fd] = client

    def _flush(self, client: Client) -> None:
        """Send `client` what its socket takes now (one call while it takes everything)."""
        self._unsent.pop(client.fd, None)
        if client.closed:
            return
        calls = client.send_queued(time.monotonic())
        self._calls += abs(calls)
        if calls < 0:
            self._drop(client)
            return
        self._update_events(client)

    def _update_events(self, client: Client) -> None:
        """Register what the client waits for: reading unless paused, writing while output is queued."""
        if client.closed or self._selector is None:
            return
        wanted = (0 if client.paused_until else selectors.EVENT_READ) | (selectors.EVENT_WRITE if client.out else 0)
        if wanted == client.events:
            return
        self._calls += 1
        try:
            if not wanted:
                self._selector.unregister(client.sock)
            elif not client.events:
                self._selector.register(client.sock, wanted, client)
            else:
                self._selector.modify(client.sock, wanted, client)
        except (KeyError, ValueError, OSError):
            self._drop(client)
            return
        client.events = wanted

    def _drop(self, client: Client) -> None:
        if client.closed:
            return
        client.closed = True
        self._clients.pop(client.fd, None)
        self._unsent.pop(client.fd, None)
        self._calls += 3
        if self._selector is not None and client.events:
            try:
                self._selector.unregister(client.sock)
            except (KeyError, ValueError, OSError):
                pass
        client.events = 0
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
        stats_json = self._steps_lines.stats_json(records)
        last_seq = records[-1][R_SEQ] if records else 0
        state: bytes | None = None
        for client in list(self._clients.values()):
            if client.state:  # the last state too: a job shorter than one state interval has its loaders in it
                state = state if state is not None else self._encode(self._state())
                self._send_bytes(client, state)
            if client.steps:
                self._send_steps(client, records, stats_json, budgeted=False)
            self._send(
                client,
                protocol.Bye(type=protocol.BYE, t=round(time.time(), 4), last_seq=last_seq, reason=self._stop_reason),
            )
        self._send_unsent()


def _on_grid(now: float, interval: float) -> float:
    """`interval` from `now`, rounded to the nearest multiple of STREAM_GRID (at least one grid step from now)."""
    due = round((now + interval) / STREAM_GRID) * STREAM_GRID
    return due if due > now else due + STREAM_GRID


def _id_problem(request_id: Any) -> str | None:
    """Why a request's `id` cannot be sent back in its reply, or None."""
    try:
        size = len(json.dumps(request_id, separators=(",", ":"), allow_nan=False, ensure_ascii=False))
    except ValueError:
        return "the id must be JSON: no NaN or Infinity"
    if size > MAX_ID_BYTES:
        return f"the id is {size} characters of JSON; at most {MAX_ID_BYTES}"
    return None


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass


def _binding_path(path: str) -> str:
    """Where the socket is bound before it is renamed to `path`: the same directory and length (a socket path is
    short), a name that is not a hook socket's ("PID.bind" beside "PID.sock")."""
    stem, _ = os.path.splitext(path)
    return f"{stem}.bind"
