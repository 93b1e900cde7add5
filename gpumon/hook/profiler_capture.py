"""ProfilerCapture: torch.profiler over N steps of the job on request, the trace written off the training thread.

Costs nothing until a capture is asked for. `start` and `step` run on the training thread at step boundaries;
the trace is written by a daemon thread to a 0600 file and renamed into place complete, over a name it created
first (O_EXCL: a symlink or file already there is never followed or replaced). Every failure becomes a
`profile_result` with `available: false` and a reason, never an exception into the job.
"""

from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from gpumon import protocol
from gpumon.private_files import create_private_file, make_private_dir

__all__ = ["TRACES_DIR", "ProfilerCapture", "trace_dir_problem", "trace_path"]

TRACES_DIR = "traces"
"""Default directory for traces: this name inside the hook's socket directory."""
_COPY_CHUNK = 1 << 20


class ProfilerCapture:
    """At most one capture at a time; `busy` from the request until its trace is written (or it failed)."""

    def __init__(self, torch: Any, outbox: deque[protocol.Message], on_error: Callable[[BaseException], None]) -> None:
        self.torch = torch
        self.outbox = outbox
        self.on_error = on_error
        self.busy = False
        self.steps_left = 0
        self._profiler: Any = None
        self._request_id: Any = None
        self._steps = 0
        self._path = ""
        self._cuda = False
        self._export: threading.Thread | None = None

    @property
    def active(self) -> bool:
        """Capturing now (the training thread calls `step` at each boundary)."""
        return self._profiler is not None

    def reserve(self) -> bool:
        """Claim the capture for a request (server thread); False when one is queued, running or being written."""
        if self.busy:
            return False
        self.busy = True
        return True

    def start(self, steps: int, path: str, request_id: Any) -> None:
        """Begin capturing at this step boundary (training thread). `path`: where the trace goes."""
        self._request_id, self._steps, self._path = request_id, steps, path
        reason = self._start(steps, path)
        if reason is not None:
            self._fail(reason)

    def _start(self, steps: int, path: str) -> str | None:
        try:
            profiler_module = self.torch.profiler
            autograd_profiler = self.torch.autograd.profiler
        except AttributeError:
            return "this torch has no torch.profiler"
        is_enabled = getattr(autograd_profiler, "_is_profiler_enabled", False)
        if is_enabled is True or (callable(is_enabled) and is_enabled()):
            return "the job is running a profiler of its own (torch allows one at a time)"
        activities = [profiler_module.ProfilerActivity.CPU]
        cuda = self.torch.cuda
        self._cuda = bool(cuda.is_available() and cuda.is_initialized())
        if self._cuda:
            activities.append(profiler_module.ProfilerActivity.CUDA)
        try:
            record = profiler_module.ProfilerAction.RECORD
            # A schedule makes torch mark each step (ProfilerStep#k) in the trace; this one records every step.
            profiler = profiler_module.profile(activities=activities, schedule=lambda _step: record)
            profiler.start()
        except Exception as exc:  # noqa: BLE001 - torch refusing to profile is a reason, not a crash
            return f"torch.profiler did not start: {type(exc).__name__}: {exc}"[:300]
        self._profiler = profiler
        self.steps_left = steps
        return None

    def step(self) -> None:
        """At a step boundary while capturing (training thread): mark it; after the last step, stop and export."""
        profiler = self._profiler
        if profiler is None:
            return
        self.steps_left -= 1
        if self.steps_left > 0:
            try:
                profiler.step()
            except Exception as exc:  # noqa: BLE001 - a failed mark ends the capture with its reason
                self._abandon(f"torch.profiler failed during the capture: {type(exc).__name__}: {exc}")
            return
        self._stop()

    def stop(self) -> None:
        """At exit (or whenever the job ends inside a capture): stop and write what was captured so far."""
        if self._profiler is not None:
            self._stop()

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        began = time.perf_counter()
        try:
            profiler.stop()
        except Exception as exc:  # noqa: BLE001
            self._fail(f"torch.profiler did not stop cleanly: {type(exc).__name__}: {exc}"[:300])
            return
        stop_ms = (time.perf_counter() - began) * 1e3
        captured = self._steps - max(0, self.steps_left)
        self._export = threading.Thread(
            target=self._write, args=(profiler, captured, stop_ms), name="gpumon-profile-export", daemon=True
        )
        self._export.start()

    def _abandon(self, reason: str) -> None:
        profiler, self._profiler = self._profiler, None
        try:
            profiler.stop()
        except Exception:  # noqa: BLE001 - already failing; the reason below says why
            pass
        self._fail(reason[:300])

    def _write(self, profiler: Any, steps: int, stop_ms: float) -> None:
        """On the export thread: the trace as JSON to a private temporary file, gzipped, renamed into place."""
        began = time.perf_counter()
        directory = os.path.dirname(self._path)
        try:
            os.close(create_private_file(self._path))  # a symlink or file already at the name is left alone
        except OSError as exc:
            self._fail(f"cannot write the trace to {self._path}: {exc.strerror or exc}"[:300])
            return
        raw = packed = ""
        claimed = self._path
        try:
            raw = _private_temp(directory, ".json")
            profiler.export_chrome_trace(raw)
            packed = _private_temp(directory, ".json.gz.part")
            with open(raw, "rb") as source, gzip.open(packed, "wb", compresslevel=6) as target:
                shutil.copyfileobj(source, target, _COPY_CHUNK)
            os.replace(packed, self._path)
            packed = claimed = ""
            size = os.path.getsize(self._path)
        except Exception as exc:  # noqa: BLE001 - the export thread never raises; the client gets the reason
            self._fail(f"cannot write the trace to {self._path}: {type(exc).__name__}: {exc}"[:300])
            return
        finally:
            for leftover in (raw, packed, claimed):
                if leftover:
                    try:
                        os.unlink(leftover)
                    except OSError:
                        pass
        self.outbox.append(
            {
                "type": protocol.PROFILE_RESULT,
                "id": self._request_id,
                "available": True,
                "path": self._path,
                "steps": steps,
                "bytes": size,
                "cuda": self._cuda,
                "stop_ms": round(stop_ms, 3),
                "export_ms": round((time.perf_counter() - began) * 1e3, 3),
            }
        )
        self.busy = False

    def _fail(self, reason: str) -> None:
        self.outbox.append(
            {"type": protocol.PROFILE_RESULT, "id": self._request_id, "available": False, "reason": reason}
        )
        self.busy = False

    def wait_written(self, timeout: float) -> bool:
        """Wait for a trace being written (tests, exit); True when none is being written any more."""
        thread = self._export
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True


def trace_dir_problem(directory: str) -> str | None:
    """Why traces cannot go to `directory` (not absolute, cannot be created, not ours, a symlink, writable by
    others), or None once it is ready: created 0700, or an existing safe one left as it is.

    Runs on the server thread when a request comes: a mkdir and an lstat, no waiting on the job."""
    if not os.path.isabs(directory) or "\0" in directory:
        return "dir must be an absolute path"
    if len(directory) > 1024:
        return "dir is longer than 1024 characters"
    reason = make_private_dir(directory)
    return None if reason is None else f"cannot write the trace: {reason}"


def trace_path(directory: str, pid: int) -> str:
    """A new trace's name: the pid and the local time to the millisecond, so captures never overwrite each other."""
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    return os.path.join(directory, f"{pid}-{stamp}.trace.json.gz")


def _private_temp(directory: str, suffix: str) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix=".gpumon-", suffix=suffix, dir=directory)  # mode 0600
    os.close(fd)
    return path
