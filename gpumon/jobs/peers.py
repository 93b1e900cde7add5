"""Whether a hook socket speaks for the process it names: its directory, file, server and process share one owner."""

from __future__ import annotations

import errno
import os
import socket
import time
from dataclasses import dataclass

from gpumon import protocol
from gpumon.protocol.paths import unsafe_socket_reason

START_SLACK_S = 2.0
"""How much later than its socket file a process may seem to start: /proc's start time and a file's time are read
from different clocks (the boot time is whole seconds)."""
CLOCK_DRIFT = 1e-3
"""Further slack per second of the socket's age: the wall clock may have been slewed since the socket was made."""


class UntrustedHook(protocol.ProtocolError):
    """A socket that may not speak for the process it names (its message says why, in one line)."""


@dataclass(frozen=True, slots=True)
class SocketClaim:
    """Who a socket file may speak for, read before connecting to it."""

    owner: int
    """The uid owning the socket's directory and file: the only uid whose process may serve it."""
    pid: int | None
    """The pid its name (<pid>.sock) claims; None for a name without one."""
    made: float
    """The socket file's ctime: the process serving it started before."""


def socket_claim(path: str) -> SocketClaim:
    """What `path` may speak for, once its directory and file are checked and the process it names runs as their
    owner and started before the file was made.

    FileNotFoundError: no such socket. ConnectionRefusedError: the process it names is gone (a stale socket).
    UntrustedHook: it may not speak for that process.
    """
    made = os.lstat(path).st_ctime
    owner = os.lstat(os.path.dirname(os.path.abspath(path))).st_uid
    reason = unsafe_socket_reason(path, owner)
    if reason is not None:
        raise UntrustedHook(reason)
    claim = SocketClaim(owner, protocol.pid_from_socket_path(path), made)
    if claim.pid is not None:
        check_process(claim.pid, claim, path)
    return claim


def process_identity(pid: int) -> tuple[int, int, float]:
    """(real uid, effective uid, start time as unix time) of a live process, read from /proc.

    ProcessLookupError when it is gone; OSError or ValueError when /proc cannot say."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as stream:
            uid_line = next(line for line in stream if line.startswith("Uid:"))
        with open(f"/proc/{pid}/stat", "rb") as stream:
            stat_fields = stream.read()
        with open("/proc/stat", encoding="ascii", errors="replace") as stream:
            boot = next(line for line in stream if line.startswith("btime "))
    except FileNotFoundError:
        raise ProcessLookupError(errno.ESRCH, f"pid {pid} is gone") from None
    except StopIteration:
        raise ValueError(f"/proc says nothing of pid {pid}'s uid or the boot time") from None
    real, effective = (int(field) for field in uid_line.split()[1:3])
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    ticks = int(stat_fields[stat_fields.rfind(b")") + 2 :].split()[19])
    return real, effective, int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")


def check_process(pid: int, claim: SocketClaim, path: str) -> None:
    """Raise unless `pid` runs as the socket's owner (real and effective uid) and started before the socket was made
    (ConnectionRefusedError when it is gone, UntrustedHook otherwise)."""
    try:
        real, effective, started = process_identity(pid)
    except ProcessLookupError:
        raise ConnectionRefusedError(errno.ECONNREFUSED, f"pid {pid} is gone") from None
    except (OSError, ValueError, IndexError) as error:
        raise UntrustedHook(f"{path}: pid {pid} cannot be read ({error})") from None
    if real != claim.owner or effective != claim.owner:
        raise UntrustedHook(f"{path} belongs to uid {claim.owner}, but pid {pid} runs as uid {real}")
    slack = START_SLACK_S + CLOCK_DRIFT * max(0.0, time.time() - claim.made)
    if started > claim.made + slack:
        raise UntrustedHook(f"{path} was made before pid {pid} started: the pid now belongs to another process")


def check_server(sock: socket.socket, path: str, claim: SocketClaim) -> int:
    """The pid serving the connected `sock`, once SO_PEERCRED shows it is the process `path` names (any of the
    owner's processes for a name without a pid), run by the socket's owner. UntrustedHook otherwise."""
    pid, uid, _gid = protocol.peer_credentials(sock)
    if uid != claim.owner:
        raise UntrustedHook(f"{path} belongs to uid {claim.owner}, but a process of uid {uid} serves it")
    if pid <= 0:
        raise UntrustedHook(f"{path} is served from outside this pid namespace")
    if claim.pid is not None and pid != claim.pid:
        raise UntrustedHook(f"{path} is served by pid {pid}, not by pid {claim.pid}")
    check_process(pid, claim, path)
    return pid


def check_hello_claims(hello: protocol.Hello, path: str, server_pid: int, claim: SocketClaim) -> protocol.Hello:
    """The hello, once its pid is the verified server's and its uid (filled in where missing) the socket's owner."""
    if hello.get("pid") != server_pid:
        raise UntrustedHook(f"{path}'s hello claims pid {hello.get('pid')}, but pid {server_pid} serves it")
    uid = hello.get("uid")
    if uid is not None and uid != claim.owner:
        raise UntrustedHook(f"{path}'s hello claims uid {uid}, but uid {claim.owner} serves it")
    return {**hello, "uid": claim.owner}
