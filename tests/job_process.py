"""Shared by the hook and attach tests: reading a training subprocess's JSON events and waiting for its socket."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any


class JobOutput:
    """Mixed into a test's Job: needs `proc` (text-mode pipes) and `socket_path`."""

    proc: subprocess.Popen[str]
    socket_path: str

    def stderr(self) -> str:
        """The job's stderr once it has exited (empty while it runs, so reading never blocks)."""
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read()

    def event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """The next JSON line on stdout whose "event" is `name`."""
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"job exited before {name!r}: rc={self.proc.wait()} stderr={self.stderr()}")
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                return event
        raise AssertionError(f"no {name!r} event within {timeout} s")

    def wait_socket(self, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.socket_path):
                return self.socket_path
            if self.proc.poll() is not None:
                raise AssertionError(f"job exited (rc={self.proc.returncode}) without a socket: {self.stderr()}")
            time.sleep(0.02)
        raise AssertionError(f"no socket at {self.socket_path} within {timeout} s")


def nvml_uuids() -> list[str]:
    """The UUID of every GPU, in NVML's index order, read straight from NVML (nvidia-ml-py)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        uuids = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            uuids.append(uuid.decode() if isinstance(uuid, bytes) else uuid)
        return uuids
    finally:
        pynvml.nvmlShutdown()
