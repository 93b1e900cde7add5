"""LaunchedJob: a command started with the hook injected, in its own process group, and stopped as a whole.

The one place gpumon starts a hooked job (`gpumon run`, `gpumon demo`, the advisor's trial runs, the demo the
TUI restarts). It owns the environment (the hook injected, knobs validated), the socket directory (a private one
when the usual one is unsafe), the log file, forwarding Ctrl+C to the job, and the stop ladder: SIGINT (the job's
own Ctrl+C), then SIGTERM, then SIGKILL of the whole group, DataLoader workers included.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from gpumon import protocol
from gpumon.jobs.job_control import LaunchError as LaunchError
from gpumon.jobs.session import AttachedJob

STOP_GRACE_S = 10.0
"""How long a job gets to stop after SIGINT before SIGTERM."""
STOP_LADDER = ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0))
"""After SIGINT and its grace: each signal and how long to wait after it."""
EXITING_GRACE_S = 5.0
"""How long a job that already said goodbye gets to exit by itself before it is signalled."""
REAP_SETTLE_S = 0.5
"""After the leader exited, how long the rest of its group gets to follow before SIGTERM, then SIGKILL."""
REAP_GRACE_S = 1.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
PRIVATE_DIR_PREFIX = "gpumon-{uid}-"
"""A private socket directory, /tmp/gpumon-<uid>-XXXXXXXX, where discovery looks too."""


EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
"""A shell's exit statuses for a command it could not find, and one it found but could not run."""


IMPORT_CHECK_TIMEOUT_S = 120.0
"""How long a child Python may take to import a module (torch on a slow shared disk takes tens of seconds)."""


def import_failure(module: str, timeout: float = IMPORT_CHECK_TIMEOUT_S) -> str | None:
    """Why this Python cannot import `module` (the last line of its error: an OSError from a missing shared library,
    anything), tried in a child process so the caller stays light; None when it can."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"importing {module} took longer than {timeout:g} s"
    except OSError as error:
        return f"cannot run {sys.executable}: {error.strerror or error}"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def new_log_path(prefix: str) -> Path:
    """A new, empty /tmp/<prefix>XXXXXXXX.log for a job's output."""
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=".log")
    os.close(handle)
    return Path(name)


def exit_status(returncode: int) -> int:
    """A shell-style exit status: a job killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to the process group `pgid`, as a terminal would; False when it is gone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def reap_group(pgid: int, settle: float = REAP_SETTLE_S, grace: float = REAP_GRACE_S) -> None:
    """End what is left of a process group whose leader exited: wait `settle` s, SIGTERM, wait `grace` s, SIGKILL."""
    for signum, wait in ((signal.SIGTERM, settle), (signal.SIGKILL, grace)):
        deadline = time.monotonic() + wait
        while signal_group(pgid, 0):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return
        if not signal_group(pgid, signum):
            return


@contextmanager
def _sigint_ignored_on_main_thread() -> Iterator[None]:
    """While a job stops, a second Ctrl+C must not leave its group running (the group has its own session)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """An ignored SIGINT is inherited across exec (a shell starts background jobs that way): the job would then
    ignore the Ctrl+C gpumon forwards. A handler is not inherited, so hold one while the job starts."""
    ignoring = threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    )
    if ignoring:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignoring:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class LaunchedJob:
    """`command` run hooked in its own session; a context manager: started on enter, stopped (group and all) on exit.

    knobs: passed as GPUMON_KNOBS (the hook's own knobs validated; others pass through to a script that reads
    them). nvtx: the hook emits NVTX ranges for `nsys` (GPUMON_NVTX). base_env: the environment to start from
    (default os.environ); extra_env: added to it. log: where the job's stdout and stderr go (stdin is then
    /dev/null); None: the job shares gpumon's terminal.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        knobs: Mapping[str, Any] | None = None,
        nvtx: bool = False,
        base_env: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        log: Path | None = None,
    ) -> None:
        if not command:
            raise LaunchError("no command to run")
        self.command = list(command)
        self.cwd = cwd
        self.log_path = log
        try:
            self.env = protocol.injection_env(os.environ if base_env is None else base_env, knobs, nvtx=nvtx)
        except protocol.ProtocolError as error:
            raise LaunchError(f"bad knob: {error}") from None
        self.env.update(extra_env or {})
        self.socket_dir, self.refused_dir = self._choose_socket_dir()
        if self.refused_dir is not None:
            self.env[protocol.SOCKET_DIR_ENV] = self.socket_dir
        self.process: subprocess.Popen[bytes] | None = None

    def _choose_socket_dir(self) -> tuple[str, str | None]:
        """(the directory the job's hook will serve in, why the usual one was refused or None).

        The hook's first choice when it is safe or does not exist yet (the hook creates it); else a new private
        directory, so the job is not left without a socket and gpumon waiting for it."""
        uid = os.getuid()
        usual = self.env.get(protocol.SOCKET_DIR_ENV) or protocol.socket_dir(uid)
        if not os.path.lexists(usual):
            return usual, None
        reason = protocol.unsafe_dir_reason(usual, uid)
        if reason is None:
            return usual, None
        return tempfile.mkdtemp(prefix=PRIVATE_DIR_PREFIX.format(uid=uid)), reason

    # -- starting --------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The launched command's pid."""
        assert self.process is not None, "the job was not started"
        return self.process.pid

    def start(self) -> LaunchedJob:
        """Start the job (LaunchError, one line, when it cannot be); once."""
        if self.process is not None:
            raise RuntimeError("a LaunchedJob starts once")
        output: IO[bytes] | None = None
        made_log = False
        if self.log_path is not None:
            try:
                made_log = not self.log_path.exists()
                output = self.log_path.open("wb")
            except OSError as error:
                raise LaunchError(f"cannot write {self.log_path}: {error.strerror or error}") from None
        name = self.command[0]
        started = False
        try:
            with _sigint_not_ignored():
                self.process = subprocess.Popen(
                    self.command,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                    stdin=subprocess.DEVNULL if output is not None else None,
                    stdout=output,
                    stderr=subprocess.STDOUT if output is not None else None,
                )
            started = True
        except FileNotFoundError:
            raise LaunchError(f"command not found: {name}", EXIT_NOT_FOUND) from None
        except PermissionError:
            raise LaunchError(f"permission denied: {name}", EXIT_NOT_EXECUTABLE) from None
        except OSError as error:
            raise LaunchError(f"cannot run {name}: {error.strerror or error}", EXIT_NOT_EXECUTABLE) from None
        finally:
            if output is not None:
                output.close()  # the job holds its own copy
            if made_log and not started and self.log_path is not None:
                self.log_path.unlink(missing_ok=True)  # no job, no output: no empty log left behind
        return self

    def __enter__(self) -> LaunchedJob:
        return self if self.process is not None else self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> int | None:
        """Stop the job (see stop) and remove the private socket directory made for it; its return code."""
        returncode = self.stop()
        if self.refused_dir is not None:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        return returncode

    def follow(self) -> AttachedJob:
        """An AttachedJob that attaches to the job's hooked processes (it, or the ranks it starts) as they serve."""
        return AttachedJob.launched(self.pid, exit_status=self.poll, socket_dirs=[self.socket_dir])

    # -- waiting and stopping --------------------------------------------------------------------

    def poll(self) -> int | None:
        """The job's return code once it exited (negative: killed by that signal), else None."""
        return self.process.poll() if self.process is not None else None

    def wait(self) -> int:
        """Wait for the job to exit by itself; its return code."""
        assert self.process is not None, "the job was not started"
        return self.process.wait()

    def wait_forwarding_signals(self) -> int:
        """Wait for the job, forwarding Ctrl+C (and TERM, HUP, QUIT) to its group; its return code."""
        process = self.process
        assert process is not None, "the job was not started"
        forwarded: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            forwarded.append(signum)
            signal_group(process.pid, signum)

        previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
        try:
            returncode = process.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if forwarded:
            reap_group(process.pid)
        return returncode

    def stop(self, grace: float = STOP_GRACE_S, *, exiting: bool = False) -> int | None:
        """Stop the job and its whole group: SIGINT, `grace` s, SIGTERM, SIGKILL; its return code (None when it was
        never started). exiting: the job said goodbye already; give it a few seconds to finish by itself first."""
        if self.process is None:
            return None
        return stop_process(self.process, grace, exiting=exiting)


def stop_process(process: subprocess.Popen[bytes], grace: float = STOP_GRACE_S, *, exiting: bool = False) -> int:
    """The stop ladder for a process started in its own session: SIGINT to its group, `grace` s, SIGTERM, SIGKILL,
    then what is left of the group; its return code. (LaunchedJob.stop; scripts that start their own.)"""
    with _sigint_ignored_on_main_thread():
        if exiting:
            _wait(process, EXITING_GRACE_S)
        for signum, wait in ((signal.SIGINT, grace), *STOP_LADDER):
            if process.poll() is not None or not signal_group(process.pid, signum):
                break
            if _wait(process, wait):
                break
        returncode = process.wait()
        reap_group(process.pid)
    return returncode


def _wait(process: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait up to `seconds` for `process` to exit; whether it did."""
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True
