"""Finding hooked jobs: scan the socket directories, clean stale sockets, read each hello (grouped: job_info)."""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpumon import protocol
from gpumon.jobs.connection import open_hook, privileged
from gpumon.jobs.job_control import AttachError as AttachError
from gpumon.jobs.job_info import JobGroup, JobInfo, group_jobs
from gpumon.jobs.peers import UntrustedHook
from gpumon.jobs.procfs import descends_from
from gpumon.protocol.paths import socket_files

HELLO_TIMEOUT = 0.5
"""Seconds a live socket gets to answer with its hello during a scan."""
_MAX_PARALLEL_PROBES = 8


@dataclass(frozen=True, slots=True)
class Discovery:
    """What one scan found: the jobs that answered, the sockets removed as stale, and live ones that did not answer."""

    jobs: tuple[JobInfo, ...]
    removed: tuple[str, ...] = ()
    unreachable: tuple[tuple[int, str], ...] = ()
    """(pid, why) of sockets whose process lives but gave no usable hello in time."""
    refused: tuple[tuple[int, str], ...] = ()
    """(pid, why) of sockets that may not speak for the pid they name (another user's, or another process serves
    them): never read, and never in the way of that pid's own socket."""

    @property
    def groups(self) -> list[JobGroup]:
        """The jobs found, their ranks grouped."""
        return group_jobs(self.jobs)

    def job(self, pid: int) -> JobInfo | None:
        """The job of `pid`, if it answered."""
        return next((job for job in self.jobs if job.pid == pid), None)

    def group_of(self, pid: int) -> JobGroup | None:
        """The group `pid` is a rank of, if any."""
        return next((group for group in self.groups if group.with_pid(pid)), None)


def read_hello(path: str, timeout: float = HELLO_TIMEOUT) -> dict[str, Any]:
    """Connect to a hook socket, check who serves it, read its hello and hang up (raises what open_hook raises)."""
    sock, _reader, hello = open_hook(path, timeout)
    sock.close()
    return dict(hello)


def _owned_by_us(path: str) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and stat.S_ISSOCK(st.st_mode)


def _remove(path: str) -> bool:
    """Unlink a socket file of ours (never another uid's, never a non-socket)."""
    if not _owned_by_us(path):
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def _probe(pid: int, path: str, timeout: float) -> tuple[str, Any]:
    """('job', JobInfo) | ('stale', path) | ('refused', reason) | ('unreachable', reason) for one socket."""
    if not protocol.pid_alive(pid):
        return ("stale", path)
    try:
        hello = read_hello(path, timeout)
    except (ConnectionRefusedError, FileNotFoundError):
        return ("stale", path)  # the pid was reused by a process that does not serve this socket
    except UntrustedHook as error:
        return ("refused", str(error))
    except TimeoutError:
        return ("unreachable", f"no hello from {path} within {timeout:g} s")
    except (protocol.ProtocolError, EOFError) as error:
        return ("unreachable", str(error))
    except OSError as error:
        return ("unreachable", f"{path}: {error.strerror or error}")
    return ("job", JobInfo.of(pid, path, hello))


_USER_SOCKET_DIR = re.compile(r"/tmp/gpumon-(\d+)(?:-[^/]*)?|/run/user/(\d+)/gpumon")


def socket_uids() -> list[int]:
    """Whose socket directories to read: ours; for root (or CAP_SYS_PTRACE) every user's that has one."""
    own = os.getuid()
    if not privileged():
        return [own]
    uids = {own}
    for path in glob.glob("/tmp/gpumon-*") + glob.glob("/run/user/*/gpumon"):
        match = _USER_SOCKET_DIR.fullmatch(path)
        if match:
            uids.add(int(match.group(1) or match.group(2)))
    override = os.environ.get(protocol.SOCKET_DIR_ENV)
    if override:
        try:
            uids.add(os.stat(override).st_uid)
        except OSError:
            pass
    return sorted(uids)


def sockets_in(directory: str) -> list[tuple[int, str]]:
    """(pid, path) of the hook sockets in one directory of ours (a job's private one), [] when it is unsafe."""
    if protocol.unsafe_dir_reason(directory) is not None:
        return []
    try:
        paths = [os.path.join(directory, name) for name in os.listdir(directory)]
    except OSError:
        return []
    found = []
    for path in paths:
        pid = protocol.pid_from_socket_path(path)
        try:
            if pid is not None and stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append((pid, path))
        except OSError:
            continue
    return found


def scan(
    timeout: float = HELLO_TIMEOUT,
    *,
    pids: Iterable[int] | None = None,
    clean: bool = True,
    uid: int | None = None,
    directories: Iterable[str] = (),
) -> Discovery:
    """Find this user's hooked jobs (root: every user's; `uid`: only that user's), and those serving in
    `directories`. Sockets of dead pids are removed (when `clean`, and only our own); each live one is asked for
    its hello, in parallel, for at most `timeout` seconds. `pids`: only look at these.

    Only directories owned by their uid with mode 0700 are read (socket_files refuses the others); other users'
    sockets (read by root) are never removed. A socket speaks only for the process it names, when that process,
    the server behind the socket and the socket's directory and file belong to one uid (connection.open_hook): any
    other is `refused`, and where a pid has sockets in several directories, the first that speaks for it counts.
    """
    wanted = None if pids is None else set(pids)
    sockets: list[tuple[int, str]] = []  # every socket found, a pid's in the order its directories are preferred
    ours: set[str] = set()  # the sockets in our own directories: the only ones a scan may remove
    own = os.getuid()
    for owner in [uid] if uid is not None else socket_uids():
        listed = socket_files(owner)
        sockets += listed
        if owner == own:
            ours.update(path for _pid, path in listed)
    for directory in directories:
        listed = sockets_in(directory)
        sockets += listed
        ours.update(path for _pid, path in listed)
    sockets = list(dict.fromkeys((pid, path) for pid, path in sockets if wanted is None or pid in wanted))
    if not sockets:
        return Discovery(jobs=())
    if len(sockets) == 1:
        results = [_probe(*sockets[0], timeout)]
    else:
        with ThreadPoolExecutor(max_workers=min(_MAX_PARALLEL_PROBES, len(sockets))) as pool:
            results = list(pool.map(lambda item: _probe(item[0], item[1], timeout), sockets))
    jobs: dict[int, JobInfo] = {}
    removed: list[str] = []
    failed: dict[int, str] = {}
    refused: list[tuple[int, str]] = []
    for (pid, path), (kind, value) in zip(sockets, results, strict=True):
        if kind == "job":
            jobs.setdefault(pid, value)
        elif kind == "stale":
            if clean and path in ours and _remove(path):
                removed.append(path)
        elif kind == "refused":
            refused.append((pid, value))
        else:
            failed.setdefault(pid, value)
    unreachable = tuple((pid, why) for pid, why in sorted(failed.items()) if pid not in jobs)
    return Discovery(
        jobs=tuple(jobs[pid] for pid in sorted(jobs)),
        removed=tuple(removed),
        unreachable=unreachable,
        refused=tuple(refused),
    )


def list_jobs(timeout: float = HELLO_TIMEOUT) -> list[JobInfo]:
    """The hooked jobs of this user that answer (stale sockets removed on the way)."""
    return list(scan(timeout).jobs)


def jobs_launched_by(root_pid: int, timeout: float = HELLO_TIMEOUT, directories: Iterable[str] = ()) -> Discovery:
    """The hooked jobs that are `root_pid` or its descendants (what `gpumon run` launched, ranks included), found
    in our socket directories and `directories` (the launch's private one)."""
    sockets = protocol.list_sockets() + [item for directory in directories for item in sockets_in(directory)]
    candidates = [pid for pid, _path in sockets if descends_from(pid, root_pid)]
    if not candidates:
        return Discovery(jobs=())
    return scan(timeout, pids=candidates, uid=os.getuid(), directories=directories)
