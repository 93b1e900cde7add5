"""Helpers for the hook tests: training jobs run in subprocesses, and reading their hook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpumon import protocol
from gpumon.jobs.connection import HookConnection
from tests.job_process import JobOutput

JOB_SCRIPT = Path(__file__).parent / "jobs" / "train.py"
REPO_ROOT = Path(__file__).resolve().parents[2]


class Job(JobOutput):
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
        self.proc = subprocess.Popen(
            [sys.executable, str(JOB_SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
        )
        self.pid = self.proc.pid
        self.socket_path = os.path.join(sock_dir, f"{self.pid}.sock")

    def go(self) -> None:
        Path(self.go_path).touch()

    def release(self, timeout: float = 30.0) -> int:
        Path(self.release_path).touch()
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.control, ignore_errors=True)


def collect_records(conn: HookConnection, last_seq: int, timeout: float = 10.0) -> dict[int, dict[str, Any]]:
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


def get_state(conn: HookConnection) -> dict[str, Any]:
    reply = conn.request({"type": protocol.GET_STATE, "id": "s"}, (protocol.STATE,))
    assert reply["type"] == protocol.STATE, reply
    return reply
