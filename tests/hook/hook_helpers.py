"""Helpers for the hook tests: training jobs run in subprocesses, and reading their hook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpumon import protocol

JOB_SCRIPT = Path(__file__).parent / "jobs" / "train.py"
REPO_ROOT = Path(__file__).resolve().parents[2]


class Job:
    """One run of tests/hook/jobs/train.py; the test releases it when done querying the hook."""

    def __init__(self, args: list[str], sock_dir: str, env: dict[str, str] | None = None, go: bool = False) -> None:
        self.control = tempfile.mkdtemp(prefix="gpumon-job-")
        self.release_path = os.path.join(self.control, "release")
        self.go_path = os.path.join(self.control, "go")
        full_env = dict(os.environ if env is None else env)
        full_env[protocol.SOCKET_DIR_ENV] = sock_dir
        full_env["GPUMON_TEST_RELEASE"] = self.release_path
        if go:
            full_env["GPUMON_TEST_GO"] = self.go_path
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in [full_env.get("PYTHONPATH", ""), str(REPO_ROOT)] if p)
        full_env.setdefault("OMP_NUM_THREADS", "1")
        self.sock_dir = sock_dir
        self.proc = subprocess.Popen([sys.executable, str(JOB_SCRIPT), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=full_env)
        self.pid = self.proc.pid
        self.socket_path = os.path.join(sock_dir, f"{self.pid}.sock")

    def event(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"job exited before {name!r}: rc={self.proc.wait()} "
                                     f"stderr={self.proc.stderr.read() if self.proc.stderr else ''}")
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
                raise AssertionError(f"job exited (rc={self.proc.returncode}) without a socket: "
                                     f"{self.proc.stderr.read() if self.proc.stderr else ''}")
            time.sleep(0.02)
        raise AssertionError(f"no socket at {self.socket_path} within {timeout} s")

    def go(self) -> None:
        Path(self.go_path).touch()

    def release(self, timeout: float = 30.0) -> int:
        Path(self.release_path).touch()
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.control, ignore_errors=True)


def collect_records(conn: protocol.HookConnection, last_seq: int, timeout: float = 10.0) -> dict[int, dict[str, Any]]:
    """Every step record up to `last_seq`, asking for the whole backlog first."""
    conn.send({"type": protocol.SUBSCRIBE, "backlog": protocol.BACKLOG_MAX, "steps_interval": 0.05})
    records: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = conn.recv(0.5)
        if msg is None or msg["type"] != protocol.STEPS:
            continue
        for record in msg["records"]:
            records[record["seq"]] = record
        if msg["last_seq"] >= last_seq and all(s in records for s in range(1, last_seq + 1)):
            break
    return records


def get_state(conn: protocol.HookConnection) -> dict[str, Any]:
    reply = conn.request({"type": protocol.GET_STATE, "id": "s"}, (protocol.STATE,))
    assert reply["type"] == protocol.STATE, reply
    return reply
