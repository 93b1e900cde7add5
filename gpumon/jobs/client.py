"""JobClient: one connection to a hooked job, read on a daemon thread into a JobState; requests with timeouts.

The thread never blocks for long (every socket call has a timeout) and never lets an exception out: a job that
dies mid-line, a malformed message or a closed socket ends the client with a reason and keeps the history.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpumon import protocol
from gpumon.jobs.connection import HookClosed, LineReader, open_hook
from gpumon.jobs.job_control import AttachError, MessageListener
from gpumon.jobs.job_control import JobRequestError as JobRequestError
from gpumon.jobs.job_info import JobInfo
from gpumon.jobs.jobstate import END_CLOSED, HookedView, JobState
from gpumon.jobs.listener import Listener

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 1.0
POLL_S = 0.25
"""Longest the reader waits in one recv before checking whether it should stop."""
WAIT_SOCKET_FIRST_S = 0.05
WAIT_SOCKET_MAX_S = 1.0
"""A socket that has not appeared is looked for again after 0.05 s, then less and less often, at most 1 s apart."""
MAX_PROTOCOL_ERRORS = 50
"""Malformed lines tolerated before the client gives up on a job."""
SUBSCRIPTION = {"steps_interval": 0.2, "state_interval": 1.0}

ENDED = "ended"


class _Pending:
    """A request waiting for its reply: matched by id and reply type, or by a predicate."""

    __slots__ = ("done", "match", "replies")

    def __init__(self, match: Callable[[Mapping[str, Any]], bool]) -> None:
        self.done = threading.Event()
        self.replies: list[dict[str, Any]] = []
        self.match = match


class HookUnanswered(AttachError):
    """A hook that did not answer the connection in time (a connect flood, a stopped job): worth another try."""


class JobClient:
    """Reads one hooked job's stream into `state`. `target`: a pid, a socket path or a JobInfo.

    Either `connect()` first (raises AttachError at once, for the CLI), or let `start()` connect on the thread.
    With `wait_for_socket`, the thread waits until the job's socket appears (a job launched by `gpumon run`
    opens it only when training starts) or its process exits.
    """

    def __init__(
        self,
        target: int | str | JobInfo,
        *,
        wait_for_socket: bool = False,
        connect_timeout: float = CONNECT_TIMEOUT,
        history_steps: int | None = None,
        subscription: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(target, JobInfo):
            self.pid, self.path = target.pid, target.socket_path
        elif isinstance(target, int):
            self.pid, self.path = target, protocol.socket_path(target)
        else:
            pid = protocol.pid_from_socket_path(target)
            self.pid, self.path = (pid if pid is not None else 0), target
        self.state = JobState(self.pid) if history_steps is None else JobState(self.pid, history_steps=history_steps)
        self.state.set_socket_path(self.path)
        self.wait_for_socket = wait_for_socket
        self.connect_timeout = connect_timeout
        self.subscription = dict(SUBSCRIPTION if subscription is None else subscription)
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._message_listeners: list[MessageListener] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: LineReader | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._pending_lock = threading.Lock()
        self.first_steps_at: float | None = None
        """time.monotonic() when the first `steps` message with records arrived (attach latency)."""
        if wait_for_socket:
            self.state.waiting = f"waiting for pid {self.pid} to start training"

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """Whether the job's stream has ended (a bye, or the connection lost)."""
        return self.state.ended

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` with what changed, on the client's thread."""
        self._listeners.append(listener)

    def add_message_listener(self, listener: MessageListener) -> None:
        """Call `listener` with every decoded message, on the client's thread."""
        self._message_listeners.append(listener)

    def view(self) -> HookedView:
        """A frozen copy of what is known about the job now."""
        return self.state.view()

    def connect(self) -> JobInfo:
        """Connect now and read the hello (raises AttachError with a one-line reason)."""
        if self._sock is None:
            self._open()
        info = self.state.info
        assert info is not None
        return info

    def start(self, listener: Listener | None = None) -> None:
        """Start the reader thread (connecting on it when `connect()` was not called)."""
        if listener is not None:
            self.add_listener(listener)
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"gpumon-job-{self.pid}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread and close the socket; the history stays."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._close()

    def wait_ended(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the stream to end; whether it did."""
        deadline = time.monotonic() + timeout
        while not self.state.ended and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.state.ended

    # -- requests (any thread) -------------------------------------------------------------------

    def request(self, message: Mapping[str, Any], reply_types: tuple[str, ...], timeout: float = 5.0) -> dict[str, Any]:
        """Send a request and wait for its reply (matched by id). Raises JobRequestError on an `error` reply,
        a timeout, or a job that is gone."""
        sock = self._sock
        if sock is None or self.state.ended:
            raise JobRequestError(
                f"not connected to pid {self.pid}" + (f" ({self.state.end_reason})" if self.state.end_reason else "")
            )
        request_id = message.get("id") or f"c{next(self._ids)}"
        wanted = (*reply_types, protocol.ERROR)
        pending = self._register(lambda m: m.get("id") == request_id and m.get("type") in wanted)
        try:
            data = protocol.encode({**message, "id": request_id})
            with self._send_lock:
                sock.sendall(data)
            if not pending.done.wait(timeout):
                raise JobRequestError(f"no {'/'.join(reply_types)} from pid {self.pid} within {timeout:g} s", "timeout")
        except (OSError, protocol.ProtocolError) as error:
            raise JobRequestError(f"cannot send to pid {self.pid}: {error}") from None
        finally:
            self._unregister(pending)
        if not pending.replies:
            raise JobRequestError(f"pid {self.pid} went away before answering ({self.state.end_reason})", "ended")
        reply = pending.replies[0]
        if reply.get("type") == protocol.ERROR:
            raise JobRequestError(str(reply.get("message", "error")), str(reply.get("code", "")))
        return reply

    def ping(self, timeout: float = 2.0) -> dict[str, Any]:
        """Ask the hook for a pong (a liveness check)."""
        return self.request({"type": protocol.PING}, (protocol.PONG,), timeout)

    def get_state(self, timeout: float = 2.0) -> dict[str, Any]:
        """Ask the hook for its state now."""
        return self.request({"type": protocol.GET_STATE}, (protocol.STATE,), timeout)

    def set_knob(self, name: str, value: Any, timeout: float = 5.0) -> dict[str, Any]:
        """Change a live knob; returns the hook's knob_ack (which says when it applies). Raises JobRequestError."""
        return self.set_knobs({name: value}, timeout)

    def set_knobs(self, knobs: Mapping[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """Ask the hook to apply `knobs`; its acknowledgement."""
        try:
            checked = protocol.validate_knobs(dict(knobs), live=True)
        except protocol.ProtocolError as error:
            raise JobRequestError(str(error), error.code) from None
        return self.request({"type": protocol.SET_KNOB, "knobs": checked}, (protocol.KNOB_ACK,), timeout)

    def diagnose(self, steps: int, timeout: float = 60.0) -> protocol.Diagnosis:
        """Count host-device syncs over the next `steps` steps; returns the `diagnosis` message (conformed).

        Waits for the job to run those steps (at most `timeout` seconds). Raises JobRequestError.
        """
        if not 1 <= steps <= protocol.DIAGNOSE_MAX_STEPS:
            raise JobRequestError(f"steps must be 1..{protocol.DIAGNOSE_MAX_STEPS}", protocol.E_BAD_MESSAGE)
        request: dict[str, Any] = {"type": protocol.DIAGNOSE, "steps": steps, "id": f"d{next(self._ids)}"}
        result = self._request_result(
            request, protocol.DIAGNOSING, protocol.DIAGNOSIS, timeout, "diagnosis", "its diagnosis"
        )
        return protocol.conform(protocol.Diagnosis, result)

    def profile(
        self,
        steps: int,
        directory: str | None = None,
        timeout: float = 120.0,
        on_started: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Capture the next `steps` steps with torch.profiler; returns the `profile_result` message (its `path` is the
        trace, when `available`). `on_started` gets the `profiling` reply. Waits at most `timeout` seconds for the
        steps to run and the trace to be written. Raises JobRequestError."""
        if not 1 <= steps <= protocol.PROFILE_MAX_STEPS:
            raise JobRequestError(f"steps must be 1..{protocol.PROFILE_MAX_STEPS}", protocol.E_BAD_MESSAGE)
        request: dict[str, Any] = {"type": protocol.PROFILE, "steps": steps, "id": f"r{next(self._ids)}"}
        if directory is not None:
            request["dir"] = directory
        return self._request_result(
            request, protocol.PROFILING, protocol.PROFILE_RESULT, timeout, "profiler trace", "its trace", on_started
        )

    def _request_result(
        self,
        request: dict[str, Any],
        started_type: str,
        result_type: str,
        timeout: float,
        awaited: str,
        ended_before: str,
        on_started: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Send a request the hook acknowledges with `started_type` and answers later with `result_type` (the same
        id); returns that answer, waiting at most `timeout` seconds in all. Raises JobRequestError."""
        started = time.monotonic()
        request_id = request["id"]
        result = self._register(lambda m: m.get("type") == result_type and m.get("id") == request_id)
        try:
            reply = self.request(request, (started_type, result_type), timeout)
            if reply.get("type") == result_type:
                return reply
            if on_started is not None:
                on_started(reply)
            if not result.done.wait(max(0.0, timeout - (time.monotonic() - started))):
                raise JobRequestError(f"no {awaited} from pid {self.pid} within {timeout:g} s", "timeout")
        finally:
            self._unregister(result)
        if not result.replies:
            raise JobRequestError(f"pid {self.pid} went away before {ended_before} ({self.state.end_reason})", "ended")
        return result.replies[0]

    def _register(self, match: Callable[[Mapping[str, Any]], bool]) -> _Pending:
        pending = _Pending(match)
        with self._pending_lock:
            self._pending[f"p{next(self._ids)}"] = pending
            if self.state.ended:
                pending.done.set()
        return pending

    def _unregister(self, pending: _Pending) -> None:
        with self._pending_lock:
            for key, value in list(self._pending.items()):
                if value is pending:
                    del self._pending[key]

    # -- the thread ------------------------------------------------------------------------------

    def _open(self) -> None:
        """Connect and take the hello (AttachError with a one-line reason)."""
        try:
            sock, reader, hello = open_hook(self.path, self.connect_timeout)
        except FileNotFoundError:
            raise AttachError(f"no gpumon hook socket for pid {self.pid} ({self.path})") from None
        except ConnectionRefusedError:
            raise AttachError(f"pid {self.pid}'s hook socket refuses connections (the job is gone?)") from None
        except TimeoutError:
            raise HookUnanswered(f"pid {self.pid}'s hook sent no hello within {self.connect_timeout:g} s") from None
        except BlockingIOError:  # EAGAIN: its listen backlog is full
            raise HookUnanswered(f"pid {self.pid}'s hook has too many connections waiting") from None
        except (protocol.ProtocolError, EOFError) as error:
            raise AttachError(f"pid {self.pid}: {error}") from None
        except OSError as error:
            raise AttachError(f"cannot connect to {self.path}: {error.strerror or error}") from None
        sock.settimeout(POLL_S)
        self._sock, self._reader = sock, reader
        self.state.apply(dict(hello))

    def _next_message(self) -> dict[str, Any] | None:
        """One decoded message, None when nothing complete arrived within POLL_S. EOFError at a closed socket;
        ProtocolError for a malformed line (which is consumed)."""
        reader = self._reader
        if reader is None:
            raise EOFError("not connected")
        return reader.read(POLL_S)

    def _wait_for_socket(self) -> bool:
        pause = WAIT_SOCKET_FIRST_S
        while not self._stop.is_set():
            if os.path.exists(self.path):
                try:
                    self._open()
                    return True
                except AttachError:
                    pass  # not listening yet, or a stale file: keep waiting
            if not protocol.pid_alive(self.pid):
                self.state.end("the job exited before it started training")
                return False
            self._stop.wait(pause)
            pause = min(WAIT_SOCKET_MAX_S, pause * 1.5)
        return False

    def _run(self) -> None:
        try:
            if self._sock is None:
                if self.wait_for_socket:
                    if not self._wait_for_socket():
                        self._notify(ENDED)
                        return
                else:
                    try:
                        self.connect()
                    except AttachError as error:
                        self.state.end(str(error))
                        self._notify(ENDED)
                        return
                self._notify(protocol.HELLO)
            self._subscribe()
            self._read_loop()
        except Exception as error:  # never out of this thread
            log.error("job %s: the reader thread failed", self.pid, exc_info=True)
            self.state.end(f"internal error: {error!r}")
        finally:
            self._close()
            self._release_pending()
            if self.state.ended:
                self._notify(ENDED)

    def _subscribe(self) -> None:
        try:
            data = protocol.encode({"type": protocol.SUBSCRIBE, "id": "subscribe", **self.subscription})
            with self._send_lock:
                if self._sock is not None:
                    self._sock.sendall(data)
        except (OSError, protocol.ProtocolError):
            pass  # the read loop finds out

    def _read_loop(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._next_message()
            except HookClosed:
                self.state.end(END_CLOSED if protocol.pid_alive(self.pid) else "the process exited")
                return
            except EOFError as error:
                self.state.end(str(error))
                return
            except protocol.ProtocolError as error:
                self.state.protocol_error(str(error))
                if self.state.view().protocol_errors >= MAX_PROTOCOL_ERRORS:
                    self.state.end(f"too many malformed messages (last: {error})")
                    return
                continue
            if message is None:
                continue
            self._dispatch(message)
            for message_listener in list(self._message_listeners):
                try:
                    message_listener(message)
                except Exception:  # a listener's bug must not stop the stream
                    log.warning("job %s: a message listener failed", self.pid, exc_info=True)
            changed = self.state.apply(message)
            if changed == protocol.STEPS and self.first_steps_at is None and message.get("records"):
                self.first_steps_at = time.monotonic()
            if changed is not None:
                self._notify(changed)
            if self.state.ended:
                return

    def _dispatch(self, message: Mapping[str, Any]) -> None:
        """Hand a reply to the request waiting for it."""
        with self._pending_lock:
            for pending in self._pending.values():
                if not pending.done.is_set() and pending.match(message):
                    pending.replies.append(dict(message))
                    pending.done.set()

    def _release_pending(self) -> None:
        with self._pending_lock:
            for pending in self._pending.values():
                pending.done.set()

    def _notify(self, what: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(what)
            except Exception:  # a listener's bug must not stop the stream
                log.warning("job %s: a listener failed on %r", self.pid, what, exc_info=True)

    def _close(self) -> None:
        sock, self._sock, self._reader = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
