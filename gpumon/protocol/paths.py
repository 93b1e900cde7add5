"""Where hook sockets live and their safety checks: socket directories, stale sockets, peer credentials, pid_alive."""

from __future__ import annotations

import glob
import os
import socket
import stat
import struct

from gpumon.protocol.names import SOCKET_DIR_ENV

PRIVATE_DIR_BASE = "/tmp"
PRIVATE_DIR_PREFIX = "gpumon-{uid}-"
"""/tmp/gpumon-<uid>-XXXXXXXX: a hook's own mkdtemp directory when every usual one was refused."""


def socket_dir(uid: int | None = None) -> str:
    """The directory the hook of a job of `uid` (default: ours) tries first.

    GPUMON_SOCKET_DIR if set; else $XDG_RUNTIME_DIR/gpumon (for our own uid, when that variable is
    set); else /tmp/gpumon-<uid>.
    """
    override = os.environ.get(SOCKET_DIR_ENV)
    if override:
        return override
    own = os.getuid()
    uid = own if uid is None else uid
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if uid == own and runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "gpumon")
    return f"/tmp/gpumon-{uid}"


def fixed_socket_dirs(uid: int | None = None) -> list[str]:
    """The usual directories, in the order the hook tries them (it serves in the first safe one).

    With GPUMON_SOCKET_DIR set, only that one. Else socket_dir(uid), then /run/user/<uid>/gpumon, then
    /tmp/gpumon-<uid>; after these the hook falls back to a private directory (private_socket_dirs).
    """
    uid = os.getuid() if uid is None else uid
    first = socket_dir(uid)
    if os.environ.get(SOCKET_DIR_ENV):
        return [first]
    return list(dict.fromkeys([first, f"/run/user/{uid}/gpumon", f"/tmp/gpumon-{uid}"]))


def private_socket_dirs(uid: int | None = None) -> list[str]:
    """The safe /tmp/gpumon-<uid>-* directories (a hook's fallback when the usual ones were refused), sorted."""
    uid = os.getuid() if uid is None else uid
    if os.environ.get(SOCKET_DIR_ENV):
        return []
    pattern = os.path.join(PRIVATE_DIR_BASE, glob.escape(PRIVATE_DIR_PREFIX.format(uid=uid))) + "*"
    return [path for path in sorted(glob.glob(pattern)) if unsafe_dir_reason(path, uid) is None]


def candidate_socket_dirs(uid: int | None = None) -> list[str]:
    """Every directory a job of `uid` may serve in (its environment may differ from the monitor's), in the hook's
    order of preference: fixed_socket_dirs, then private_socket_dirs."""
    return list(dict.fromkeys(fixed_socket_dirs(uid) + private_socket_dirs(uid)))


def socket_path(pid: int, uid: int | None = None) -> str:
    """The socket a job of `pid` serves on in `uid`'s socket directory (socket_dir): PID.sock."""
    return os.path.join(socket_dir(uid), f"{pid}.sock")


def pid_from_socket_path(path: str) -> int | None:
    """The pid a socket's name gives (PID.sock), None for any other name."""
    name = os.path.basename(path)
    if not name.endswith(".sock"):
        return None
    stem = name[: -len(".sock")]
    return int(stem) if stem.isascii() and stem.isdigit() else None


def unsafe_dir_reason(path: str, uid: int | None = None) -> str | None:
    """Why `path` must not be used as a socket directory of `uid`, or None when it is safe.

    Safe: a real directory (not a symlink), owned by `uid`, with no access for group or others.
    """
    uid = os.getuid() if uid is None else uid
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return None


def pid_alive(pid: int) -> bool:
    """True while `pid` runs. A zombie (exited, not yet reaped by its parent) counts as gone."""
    if pid <= 0:
        return False  # kill(0 or -n) would ask about a whole process group
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            data = stream.read()
    except OSError:
        return True  # no /proc to ask: kill(0) said it exists
    end = data.rfind(b")")
    return data[end + 2 : end + 3] != b"Z"


def socket_files(uid: int | None = None) -> list[tuple[int, str]]:
    """(pid, path) of every hook socket in the safe candidate directories of `uid`, in the directories' order.

    A pid may appear more than once (a socket of it in several directories): which one speaks for it is for the
    client to check (the server behind it must be that pid, run by the directory's owner).
    """
    found: list[tuple[int, str]] = []
    for directory in candidate_socket_dirs(uid):
        if unsafe_dir_reason(directory, uid) is not None:
            continue
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            pid = pid_from_socket_path(path)
            if pid is None:
                continue
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    found.append((pid, path))
            except OSError:
                continue
    return found


def list_sockets(uid: int | None = None) -> list[tuple[int, str]]:
    """(pid, path) of each hook socket found in the safe candidate directories, sorted by pid (the first
    directory's socket where a pid has several)."""
    found: dict[int, str] = {}
    for pid, path in socket_files(uid):
        found.setdefault(pid, path)
    return sorted(found.items())


def unsafe_socket_reason(path: str, uid: int) -> str | None:
    """Why the socket file `path` may not speak for a job of `uid`, or None: its directory must be a real directory
    of `uid`'s that nobody else may write to, and the file a socket (not a symlink) owned by `uid`."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.lstat(directory)
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != uid:
        return f"{directory} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o022:
        return f"{directory} has mode {stat.S_IMODE(st.st_mode):04o}: others may write to it"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not {uid}"
    return None


def is_stale(path: str) -> bool:
    """True when nobody serves `path`: its pid is dead, or a connection is refused (pid reused)."""
    pid = pid_from_socket_path(path)
    if pid is not None and not pid_alive(pid):
        return True
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def remove_stale_sockets(uid: int | None = None) -> list[str]:
    """Remove the sockets of jobs that are gone (the monitor's job; the hook removes its own at exit)."""
    removed = []
    for _pid, path in list_sockets(uid):
        if is_stale(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


_UCRED = struct.Struct("3i")


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def peer_allowed(peer_uid: int, own_uid: int | None = None) -> bool:
    """The hook talks to its own user and to root, nobody else."""
    own_uid = os.getuid() if own_uid is None else own_uid
    return peer_uid == own_uid or peer_uid == 0
