"""Checking a py-spy target and reading it once: a live Python process, py-spy found, and one line for each way
py-spy can fail (never advice that lets one user read another's processes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpumon.jobs.discovery import AttachError
from gpumon.jobs.pyspy.stacks import ThreadStack, parse_dump
from gpumon.printable import printable

PROBE_TIMEOUT = 10.0
PROBE_ATTEMPTS = 3

PERMISSION_HELP = (
    "py-spy may not read pid {pid}'s memory (ptrace permission denied): run gpumon as root (sudo), or grant py-spy "
    "the capability once with `sudo setcap cap_sys_ptrace+ep $(which py-spy)`, or allow same-user tracing with "
    "`echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope`; or add `import gpumon.hook` to the job"
)
OTHER_USER_HELP = (
    "pid {pid} belongs to {owner}: only its owner or root can watch it "
    "(as {owner}, or with sudo; the job can also add `import gpumon.hook` for its owner's gpumon)"
)
MISSING_HELP = (
    "pid {pid} has no gpumon hook and py-spy is not installed: `pip install py-spy` "
    "(gpumon depends on it; reinstall gpumon), or add `import gpumon.hook` to the job"
)


def find_pyspy() -> str | None:
    """py-spy next to this Python (a venv not on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def process_name(pid: int) -> str:
    """A process's name from /proc ('?' when gone)."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as stream:
            return stream.read().strip()
    except OSError:
        return "?"


def is_python_process(pid: int) -> bool | None:
    """True/False from /proc (the executable's name, or libpython mapped in); None when /proc does not say."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None
    if exe.startswith(("python", "pypy")):
        return True
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                if "libpython" in line:
                    return True
    except OSError:
        return None
    return False


def check_target(pid: int) -> None:
    """Raise AttachError (one line) when `pid` is not a live Python process."""
    if pid <= 0:
        raise AttachError(f"{pid} is not a valid pid")
    if not os.path.exists(f"/proc/{pid}"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise AttachError(f"no process with pid {pid}") from None
        except PermissionError:
            pass
    if is_python_process(pid) is False:
        raise AttachError(f"pid {pid} ({process_name(pid)}) is not a Python process")


def _other_owner(pid: int) -> str | None:
    """The user name (or uid) owning `pid` when that is another user and we are not root; else None."""
    euid = os.geteuid()
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    if euid == 0 or uid == euid:
        return None
    try:
        import pwd

        return printable(pwd.getpwuid(uid).pw_name)
    except (KeyError, ImportError):
        return f"uid {uid}"


def explain_pyspy_failure(pid: int, output: str, returncode: int | None = None) -> str:
    """One line for what went wrong in a py-spy run, from its stderr."""
    text = output.strip()
    if "Permission Denied" in text or "Operation not permitted" in text or "EPERM" in text:
        owner = _other_owner(pid)
        if owner is not None:  # no capability or ptrace setting lets one user read another's process: never advised
            return OTHER_USER_HELP.format(pid=pid, owner=owner)
        return PERMISSION_HELP.format(pid=pid)
    if "Failed to find python version" in text:
        return f"pid {pid} ({process_name(pid)}) does not look like a Python process py-spy can read"
    if "No such file or directory" in text or "No such process" in text or "process exited" in text.lower():
        return f"no process with pid {pid} (it exited?)"
    for line in text.splitlines():
        if line.startswith("Error:"):
            return f"py-spy failed on pid {pid}: {line[len('Error:') :].strip()}"
    first = next((line for line in text.splitlines() if line.strip()), f"exit code {returncode}")
    return f"py-spy failed on pid {pid}: {first.strip()}"


def probe(pid: int, pyspy: str | None = None, timeout: float = PROBE_TIMEOUT) -> list[ThreadStack]:
    """Check that py-spy can read `pid` (one `py-spy dump`); return its stacks or raise AttachError."""
    check_target(pid)
    pyspy = pyspy or find_pyspy()
    if pyspy is None:
        raise AttachError(MISSING_HELP.format(pid=pid))
    failure = ""
    for _attempt in range(PROBE_ATTEMPTS):
        try:
            done = subprocess.run(
                [pyspy, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=quiet_env(),
            )
        except subprocess.TimeoutExpired:
            raise AttachError(f"py-spy did not read pid {pid} within {timeout:g} s") from None
        except OSError as error:
            raise AttachError(f"cannot run {pyspy}: {error.strerror or error}") from None
        if done.returncode == 0:
            return parse_dump(done.stdout)
        failure = explain_pyspy_failure(pid, done.stderr + done.stdout, done.returncode)
        if not failure.startswith("py-spy failed"):
            break  # permission, not Python, gone: trying again will not help
        time.sleep(0.1)  # a non-blocking read can catch the process mid-change: try again
    raise AttachError(failure)


def quiet_env() -> dict[str, str]:
    """py-spy's environment without Rust backtraces in its error messages."""
    return {**os.environ, "RUST_BACKTRACE": "0"}
