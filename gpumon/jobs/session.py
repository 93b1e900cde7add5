"""The job the dashboard follows: every local rank of a hooked job (AttachedJob), or a py-spy estimate.

`open_job(pid)` is what `gpumon attach PID` does: the hooked job with its ranks when the pid has a hook socket,
else the py-spy sampler once py-spy has proved it can read the pid; one-line AttachError otherwise.
`hooked_job(pid)` is what live experiments need: the hooked job, NoHook when the pid has no hook.
`AttachedJob.launched(pid)` follows what `gpumon run` started, waiting for its socket(s) to appear.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpumon import protocol
from gpumon.jobs.client import ENDED, HookUnanswered, JobClient
from gpumon.jobs.connection import privileged
from gpumon.jobs.discovery import HELLO_TIMEOUT, jobs_launched_by, scan
from gpumon.jobs.job_control import AttachError, NoHook, TrialJob
from gpumon.jobs.job_info import JobGroup, JobInfo
from gpumon.jobs.jobstate import HookedView, group_view
from gpumon.jobs.listener import Listener
from gpumon.jobs.procfs import process_command, process_uid
from gpumon.jobs.pyspy.sampler import PySpySampler
from gpumon.jobs.source import JobSource
from gpumon.printable import printable

log = logging.getLogger(__name__)

LAUNCH_POLL_S = 0.05
"""How soon a launched job's sockets are first looked for; then less and less often, up to RANK_POLL_S apart."""
RANK_POLL_S = 1.0
"""How often, after that, more ranks of it are looked for."""
ATTACH_DEADLINE_S = 6.0
ATTACH_RETRY_FIRST_S = 0.25
"""A hook that does not answer (a connection flood, a stalled job) is tried again after 0.25 s, then twice as long
each time, until ATTACH_DEADLINE_S after the first try."""


class AttachedJob:
    """One or more JobClients (the local ranks of one job) seen as one job; `view()` is the primary rank's view
    with every rank's summary and the straggler."""

    def __init__(
        self,
        clients: list[JobClient] | None = None,
        *,
        primary_pid: int | None = None,
        launched_pid: int | None = None,
        exit_status: Callable[[], int | None] | None = None,
        socket_dirs: Sequence[str] = (),
    ) -> None:
        self._clients: list[JobClient] = list(clients or [])
        self._lock = threading.Lock()
        self.primary_pid = (
            primary_pid if primary_pid is not None else (self._clients[0].pid if self._clients else launched_pid)
        )
        self.launched_pid = launched_pid
        self._exit_status = exit_status
        self._socket_dirs = list(socket_dirs)
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._launch_command = process_command(launched_pid) if launched_pid is not None else ""

    @classmethod
    def for_pid(
        cls, pid: int, timeout: float = HELLO_TIMEOUT, deadline_s: float = ATTACH_DEADLINE_S
    ) -> AttachedJob | None:
        """Connect to `pid`'s hook and to the other local ranks of its job; None when `pid` has no hook socket.

        A hook that does not answer in time is tried again, less and less often, for up to `deadline_s`. Raises
        AttachError when the socket exists but cannot be used (another protocol version, no answer by then).
        """
        deadline = time.monotonic() + deadline_s
        pause = ATTACH_RETRY_FIRST_S
        while True:
            try:
                return cls._for_pid_once(pid, timeout)
            except HookUnanswered as error:
                if time.monotonic() + pause > deadline:
                    raise AttachError(f"{error} (tried for {deadline_s:g} s)") from None
                log.info("pid %d: %s; trying again in %.2f s", pid, error, pause)
            time.sleep(pause)
            pause *= 2

    @classmethod
    def _for_pid_once(cls, pid: int, timeout: float) -> AttachedJob | None:
        owner = process_uid(pid)
        if owner is not None and owner != os.getuid() and os.geteuid() == 0:
            found = scan(timeout, uid=owner, clean=False)  # root watching another user's job: read, touch nothing
        else:
            found = scan(timeout)
        group = found.group_of(pid)
        if group is None:
            for unreachable_pid, reason in found.unreachable:
                if unreachable_pid == pid:
                    raise HookUnanswered(f"pid {pid} has a gpumon hook that cannot be used: {reason}")
            return None
        return cls.for_group(group, primary_pid=pid)

    @classmethod
    def for_group(cls, group: JobGroup, primary_pid: int | None = None) -> AttachedJob:
        """Connect to every rank of `group` (ranks that fail are left out; the primary must connect)."""
        primary_pid = group.primary.pid if primary_pid is None else primary_pid
        clients: list[JobClient] = []
        for info in group.jobs:
            client = JobClient(info)
            try:
                client.connect()
            except AttachError:
                if info.pid == primary_pid:
                    for connected in clients:
                        connected.stop()
                    raise
                continue
            clients.append(client)
        return cls(clients, primary_pid=primary_pid)

    @classmethod
    def launched(
        cls, pid: int, exit_status: Callable[[], int | None] | None = None, socket_dirs: Sequence[str] = ()
    ) -> AttachedJob:
        """Follow what `gpumon run` started as `pid`: its hooked processes (it or its descendants, e.g. the
        ranks torchrun starts) are attached as their sockets appear, in our socket directories or `socket_dirs`.
        `exit_status`: the launched process's exit code once it exited (Popen.poll)."""
        return cls([], launched_pid=pid, exit_status=exit_status, socket_dirs=socket_dirs)

    # -- the source interface -------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The primary rank's pid."""
        assert self.primary_pid is not None
        return self.primary_pid

    @property
    def clients(self) -> list[JobClient]:
        """Every connected rank's client."""
        with self._lock:
            return list(self._clients)

    @property
    def primary(self) -> JobClient | None:
        """The client of the primary rank (the pid asked for, else rank 0), None while none is connected."""
        clients = self.clients
        return next((c for c in clients if c.pid == self.primary_pid), clients[0] if clients else None)

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` with what changed, on any rank's thread."""
        self._listeners.append(listener)

    def start(self, listener: Listener | None = None) -> None:
        """Start every rank's client (and, for a launched job, the watch for its ranks)."""
        if listener is not None:
            self.add_listener(listener)
        for client in self.clients:
            client.start(self._notify)
        if self.launched_pid is not None and self._thread is None:
            self._thread = threading.Thread(target=self._follow_launch, name="gpumon-launch-watch", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop every rank's client and the launch watch."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(1.0)
        for client in self.clients:
            client.stop()

    @property
    def ended(self) -> bool:
        """Whether every rank has ended (a launched job with none: whether its process has)."""
        clients = self.clients
        if not clients:
            return self.launched_pid is not None and not protocol.pid_alive(self.launched_pid)
        return all(client.ended for client in clients)

    def view(self) -> HookedView:
        """The primary rank's view, with every rank's summary and the straggler."""
        clients = self.clients
        exit_code = self._exit_status() if self._exit_status is not None else None
        if not clients:
            assert self.launched_pid is not None
            command = self._launch_command or f"pid {self.launched_pid}"
            launched_over = exit_code is not None or not protocol.pid_alive(self.launched_pid)
            return HookedView(
                pid=self.launched_pid,
                waiting=None if launched_over else f"waiting for `{command}` to start training",
                ended=launched_over,
                exit_code=exit_code,
                end_reason="the job exited before it started training (no hook socket appeared)"
                if launched_over
                else None,
            )
        views = [client.view() for client in clients]
        primary = next((i for i, c in enumerate(clients) if c.pid == self.primary_pid), 0)
        view = group_view(views, primary)
        if exit_code is not None and view.exit_code is None:
            view = replace(view, exit_code=exit_code)
        return view

    # -- following a launch ---------------------------------------------------------------------

    def _follow_launch(self) -> None:
        assert self.launched_pid is not None
        root = self.launched_pid
        pause = LAUNCH_POLL_S
        while not self._stop.is_set():
            try:
                found = jobs_launched_by(root, directories=self._socket_dirs)
            except Exception:  # a scan error is retried
                log.debug("scanning for the ranks of pid %s failed", root, exc_info=True)
                found = None
            if found is not None:
                self._add(found.jobs)
            root_alive = protocol.pid_alive(root) and (self._exit_status is None or self._exit_status() is None)
            if not root_alive:
                self._notify(ENDED)
                return
            self._stop.wait(RANK_POLL_S if self.clients else pause)
            pause = min(RANK_POLL_S, pause * 1.5)

    def _add(self, jobs: tuple[JobInfo, ...]) -> None:
        known = {client.pid for client in self.clients}
        for info in jobs:
            if info.pid in known:
                continue
            client = JobClient(info)
            try:
                client.connect()
            except AttachError:
                continue
            with self._lock:
                self._clients.append(client)
                self._clients.sort(
                    key=lambda c: (
                        c.state.info.rank if c.state.info and c.state.info.rank is not None else 1 << 30,
                        c.pid,
                    )
                )
                if self.primary_pid == self.launched_pid and not any(c.pid == self.launched_pid for c in self._clients):
                    self.primary_pid = self._clients[0].pid
            client.start(self._notify)
            self._notify(protocol.HELLO)

    def _notify(self, what: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(what)
            except Exception:  # a listener's bug must not stop the session
                log.warning("a job session listener failed on %r", what, exc_info=True)


def unseen_reason(pid: int) -> str | None:
    """Why gpumon cannot see `pid`'s hook whatever it has: no such process, or another user's (we are not root);
    None when it could."""
    if not protocol.pid_alive(pid):
        return f"no process with pid {pid}"
    owner = process_uid(pid)
    if owner is None or owner == os.getuid() or privileged():
        return None
    return (
        f"pid {pid} belongs to user {user_name(owner)}: gpumon sees only your own jobs' sockets (run as that user or "
        "root)"
    )


def no_hook_reason(pid: int) -> str:
    """One line for a pid whose hook gpumon did not find: gone, another user's, or truly without the hook."""
    return unseen_reason(pid) or f"pid {pid} has no gpumon hook"


def user_name(uid: int) -> str:
    """The name of user `uid` (its number when it has none)."""
    try:
        import pwd

        return printable(pwd.getpwuid(uid).pw_name)
    except (KeyError, ImportError):
        return f"uid {uid}"


def open_job(pid: int, *, native: bool = False) -> JobSource:
    """What `gpumon attach PID` attaches to: the hooked job, or a py-spy sampler; AttachError (one line) when
    neither can be had."""
    if pid <= 0:
        raise AttachError(f"{pid} is not a valid pid")
    if not protocol.pid_alive(pid):
        raise AttachError(f"no process with pid {pid}")
    job = AttachedJob.for_pid(pid)  # another user's job: py-spy's probe says only its owner or root may watch it
    if job is not None:
        return job
    sampler = PySpySampler(pid, native=native)
    sampler.probe()
    return sampler


def hooked_job(pid: int) -> AttachedJob:
    """The hooked job `pid` is part of, every local rank connected; AttachError (one line) when gpumon cannot see
    the pid or use its hook, NoHook when it has none."""
    reason = unseen_reason(pid)
    if reason is not None:
        raise AttachError(reason)
    job = AttachedJob.for_pid(pid)
    if job is None or job.primary is None:
        raise NoHook(no_hook_reason(pid))
    return job


def trial_source(job: TrialJob) -> tuple[JobSource, int | None] | None:
    """A trial's job as the source a pane follows, with the pid it launched: what LaunchedJob.follow gave (an
    AttachedJob); None for a trial job gpumon.jobs did not make."""
    if isinstance(job, AttachedJob):
        return job, job.launched_pid
    return None
