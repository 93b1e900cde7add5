"""Helpers for the attach tests: hooked and unhooked CPU training jobs in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpumon import protocol
from tests.job_process import JobOutput

JOBS = Path(__file__).parent / "jobs"
HOOKED_JOB = JOBS / "hooked_train.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
SPY_TARGET = REPO_ROOT / "tests" / "fixtures" / "pyspy" / "spy_target.py"
"""The py-spy fixtures' target: their dumps name its lines."""


def job_env(sock_dir: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env[protocol.SOCKET_DIR_ENV] = sock_dir
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO_ROOT), env.get("PYTHONPATH", "")] if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("GPUMON_KNOBS", None)
    env.update(extra or {})
    return env


class Job(JobOutput):
    """One training subprocess; killed (with its process group) by the fixture that made it."""

    def __init__(self, script: Path, args: list[str], sock_dir: str, env: dict[str, str] | None = None) -> None:
        self.sock_dir = sock_dir
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=job_env(sock_dir, env),
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self.socket_path = os.path.join(sock_dir, f"{self.pid}.sock")

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def group_alive(pgid: int) -> bool:
    """Whether any process of the group `pgid` is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until(predicate: Any, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


class PtyProgram:
    """A program run in a pseudo-terminal (like a user's terminal), for the dashboard's end-to-end tests."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path = REPO_ROOT, size: tuple[int, int] = (120, 40)):
        import fcntl
        import pty
        import struct
        import termios

        self.master, slave = pty.openpty()
        columns, lines = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        env = dict(env, TERM="xterm-256color", COLUMNS=str(columns), LINES=str(lines))
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
        )
        os.close(slave)
        self.output = b""
        import pyte

        self.screen = pyte.Screen(columns, lines)
        """What a terminal shows: a frame sends only the cells that changed, so a phrase on screen need not be one
        run of bytes in the output."""
        self._stream = pyte.ByteStream(self.screen)

    def shows(self, marker: bytes) -> bool:
        """Whether `marker` is on the screen now, or was ever written in one piece (e.g. a line before the TUI)."""
        return marker in self.output or marker.decode() in "\n".join(self.screen.display)

    def read_until(self, marker: bytes, timeout: float = 30.0) -> bool:
        """Read the screen output until `marker` shows up (True) or the time is up / the program ended (False)."""
        import select

        deadline = time.monotonic() + timeout
        start = len(self.output)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return False
            if not chunk:
                return False
            self.output += chunk
            self._stream.feed(chunk)
            if marker in self.output[max(0, start - len(marker)) :] or self.shows(marker):
                return True
        return False

    def press(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait(self, timeout: float = 30.0) -> int:
        """The exit code, reading (and so not blocking) the terminal meanwhile."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.read_until(b"\0never\0", timeout=0.1)
        return self.proc.wait(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        os.close(self.master)
