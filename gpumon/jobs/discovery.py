"""Finding hooked jobs: scan the socket directories, clean stale sockets, read each hello, group DDP ranks."""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpumon import protocol
from gpumon.jobs.connection import open_hook, privileged
from gpumon.jobs.peers import UntrustedHook
from gpumon.protocol.paths import socket_files

HELLO_TIMEOUT = 0.5
"""Seconds a live socket gets to answer with its hello during a scan."""
_MAX_PARALLEL_PROBES = 8


class AttachError(Exception):
    """A user-facing attach failure (no such job, wrong protocol, no permission): one line, shown as is."""


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One hooked process, as its hello describes it."""

    pid: int
    socket_path: str
    hello: protocol.Hello = field(repr=False)
    """The hello as its TypedDict: its fields need no type checks."""

    @classmethod
    def of(cls, pid: int, socket_path: str, message: Mapping[str, Any]) -> JobInfo:
        """The job a hello message describes, its fields read once (protocol.conform)."""
        return cls(pid=pid, socket_path=socket_path, hello=protocol.conform(protocol.Hello, message))

    @property
    def argv(self) -> list[str]:
        return self.hello.get("argv") or []

    @property
    def command(self) -> str:
        """The command line as one string (the executable's name for a bare `python -c`).

        A `python -m package` run has package/__main__.py as its argv[0]: it is said as `python -m package`."""
        argv = self.argv
        executable = self.hello.get("executable") or "?"
        if argv and os.path.basename(argv[0]) == "__main__.py":
            package = os.path.basename(os.path.dirname(argv[0]))
            argv = [os.path.basename(executable) or "python", "-m", package, *argv[1:]]
        return " ".join(argv) or executable

    @property
    def cwd(self) -> str:
        return self.hello.get("cwd", "")

    @property
    def owner(self) -> int | None:
        """The uid the job runs as: the socket's owner, checked when it was connected to (connection.open_hook)."""
        return self.hello.get("uid")

    @property
    def ppid(self) -> int | None:
        return self.hello.get("ppid")

    @property
    def hostname(self) -> str:
        return self.hello.get("hostname", "")

    @property
    def dist(self) -> protocol.DistInfo:
        return self.hello.get("dist") or {}

    @property
    def rank(self) -> int | None:
        return self.dist.get("rank")

    @property
    def local_rank(self) -> int | None:
        return self.dist.get("local_rank")

    @property
    def world_size(self) -> int | None:
        return self.dist.get("world_size")

    @property
    def cuda(self) -> protocol.CudaInfo:
        return self.hello.get("cuda") or {}

    @property
    def devices(self) -> list[protocol.CudaDevice]:
        """The CUDA devices the job sees (empty until the job itself initializes CUDA)."""
        return self.cuda.get("devices") or []

    @property
    def device(self) -> int | None:
        """The index (as the job sees it) of the device its steps run on, when known."""
        return self.cuda.get("device")

    @property
    def protocol_version(self) -> int | None:
        return self.hello.get("protocol")

    @property
    def compatible(self) -> bool:
        return self.protocol_version == protocol.PROTOCOL_VERSION

    @property
    def group_key(self) -> tuple[str, ...] | None:
        """What the ranks of one distributed job share, or None for a single-process job.

        The torchrun / elastic run id with the rendezvous address (every node of a job shares both; the address
        tells apart jobs left on torchrun's default run id, 'none'); else the rendezvous address
        (MASTER_ADDR:MASTER_PORT); else, for a process that says it is one of several (WORLD_SIZE > 1), its parent
        (the launcher).
        """
        dist = self.dist
        world = self.world_size
        if world is not None and world <= 1:
            return None
        run_id = dist.get("run_id")
        if run_id:
            return ("run_id", str(run_id), str(dist.get("master_addr") or ""), str(dist.get("master_port") or ""))
        if dist.get("master_addr") and dist.get("master_port") and world:
            return ("master", str(dist["master_addr"]), str(dist["master_port"]))
        if world and world > 1 and self.ppid is not None:
            return ("parent", str(self.ppid))
        return None


@dataclass(frozen=True, slots=True)
class JobGroup:
    """The local ranks of one distributed job (or one process alone), sorted by rank then pid."""

    key: tuple[str, ...] | None
    jobs: tuple[JobInfo, ...]

    @property
    def pids(self) -> list[int]:
        return [job.pid for job in self.jobs]

    @property
    def primary(self) -> JobInfo:
        """Rank 0 where present, else the lowest rank or pid."""
        return self.jobs[0]

    @property
    def distributed(self) -> bool:
        return self.key is not None

    @property
    def world_size(self) -> int | None:
        return self.primary.world_size

    @property
    def label(self) -> str:
        """'pid 1234: python train.py' or 'torchrun run abc: ranks 0,1 of 4 (pids 11, 12): python train.py'."""
        command = self.primary.command
        if not self.distributed:
            return f"pid {self.primary.pid}: {command}"
        ranks = ",".join("?" if job.rank is None else str(job.rank) for job in self.jobs)
        world = f" of {self.world_size}" if self.world_size else ""
        pids = ", ".join(str(pid) for pid in self.pids)
        assert self.key is not None
        kind = {"run_id": f"torchrun run {self.key[1]}", "master": f"DDP job at {self.key[1]}:{self.key[2]}"}.get(
            self.key[0], "DDP job"
        )
        return f"{kind}: ranks {ranks}{world} (pids {pids}): {command}"

    def with_pid(self, pid: int) -> bool:
        return pid in self.pids


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
        return group_jobs(self.jobs)

    def job(self, pid: int) -> JobInfo | None:
        return next((job for job in self.jobs if job.pid == pid), None)

    def group_of(self, pid: int) -> JobGroup | None:
        return next((group for group in self.groups if group.with_pid(pid)), None)


def _sort_key(job: JobInfo) -> tuple[int, int, int]:
    rank = job.rank
    return (0 if rank is not None else 1, rank if rank is not None else 0, job.pid)


def group_jobs(jobs: Iterable[JobInfo]) -> list[JobGroup]:
    """Put the ranks of each distributed job together; single-process jobs stay alone. Groups in pid order.

    Ranks of one job run as one user: processes of two users never share a group, whatever run id they claim."""
    by_key: dict[tuple[int | None, tuple[str, ...]], list[JobInfo]] = {}
    singles: list[JobGroup] = []
    for job in jobs:
        key = job.group_key
        if key is None:
            singles.append(JobGroup(None, (job,)))
        else:
            by_key.setdefault((job.owner, key), []).append(job)
    groups = singles + [JobGroup(key, tuple(sorted(members, key=_sort_key))) for (_, key), members in by_key.items()]
    return sorted(groups, key=lambda group: min(group.pids))


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


def process_uid(pid: int) -> int | None:
    """The real uid a process runs as (None when it is gone)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def process_argv(pid: int) -> list[str]:
    """A process's arguments from /proc ([] when gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            raw = stream.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.removesuffix(b"\0").split(b"\0")] if raw else []


def process_command(pid: int) -> str:
    """A process's command line from /proc ('' when gone or unreadable)."""
    return " ".join(part for part in process_argv(pid) if part)


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc (None when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            data = stream.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def descends_from(pid: int, ancestor: int, max_depth: int = 64) -> bool:
    """True when `pid` is `ancestor` or one of its descendants (walking /proc parent links)."""
    current: int | None = pid
    for _ in range(max_depth):
        if current is None or current <= 1:
            return False
        if current == ancestor:
            return True
        current = parent_pid(current)
    return False


def jobs_launched_by(root_pid: int, timeout: float = HELLO_TIMEOUT, directories: Iterable[str] = ()) -> Discovery:
    """The hooked jobs that are `root_pid` or its descendants (what `gpumon run` launched, ranks included), found
    in our socket directories and `directories` (the launch's private one)."""
    sockets = protocol.list_sockets() + [item for directory in directories for item in sockets_in(directory)]
    candidates = [pid for pid, _path in sockets if descends_from(pid, root_pid)]
    if not candidates:
        return Discovery(jobs=())
    return scan(timeout, pids=candidates, uid=os.getuid(), directories=directories)
