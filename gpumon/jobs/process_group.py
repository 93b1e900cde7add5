"""Stopping a launched job's whole process group (the job and e.g. its DataLoader workers), leaving nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

STOP_SEQUENCE = ((signal.SIGINT, None), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0))
"""Signal and how long to wait after it; None: the caller's grace (the job's own Ctrl+C handling)."""


def signal_group(process: subprocess.Popen[Any], signum: int) -> bool:
    """Send `signum` to the process group led by `process`, as a terminal would; False when it is gone."""
    try:
        os.killpg(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def reap_group(pgid: int, grace: float = 2.0, settle: float | None = None) -> None:
    """End what is left of a process group whose leader exited: wait `settle` s (default `grace`), TERM, then KILL."""
    first_wait = grace if settle is None else settle
    for signum, wait in ((0, first_wait), (signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        deadline = time.monotonic() + wait
        while True:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if signum:
            try:
                os.killpg(pgid, signum)
            except (ProcessLookupError, PermissionError):
                return


def stop_group(process: subprocess.Popen[Any], grace: float, reap_grace: float = 2.0,
               reap_settle: float | None = None) -> int:
    """Stop a running job: SIGINT (its Ctrl+C), then SIGTERM, then SIGKILL, then reap its group; its return code."""
    for signum, wait in STOP_SEQUENCE:
        if process.poll() is not None:
            break
        if not signal_group(process, signum):
            break
        try:
            process.wait(grace if wait is None else wait)
        except subprocess.TimeoutExpired:
            continue
    returncode = process.wait()
    reap_group(process.pid, grace=reap_grace, settle=reap_settle)
    return returncode
