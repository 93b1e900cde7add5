"""A job whose argv, working directory and environment hold bytes that are not UTF-8: its hook
still greets every client, with each such byte written out as `\\xff`, and `gpumon attach --json` and `gpumon jobs
--json` read it. Before, encoding the hello raised and the hook closed every connection."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from gpumon import protocol
from gpumon.jobs.connection import HookConnection
from tests.attach.attach_helpers import REPO_ROOT, job_env
from tests.job_process import JobOutput

SLEEPER = """
import json, os, sys
import gpumon.hook  # noqa: F401
import torch  # noqa: F401 - the hook's server starts once torch is imported
print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


class ByteJob(JobOutput):
    def __init__(self, sock_dir: str, cwd: bytes) -> None:
        env: dict[Any, Any] = job_env(sock_dir)
        env[b"MASTER_ADDR"] = b"host\xfe"
        env[b"TORCHELASTIC_RUN_ID"] = b"run\xfd"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SLEEPER, os.fsdecode(b"arg\xff"), "\udcff\N{BOX DRAWINGS LIGHT HORIZONTAL}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
        self.pid = self.proc.pid
        self.socket_path = os.path.join(sock_dir, f"{self.pid}.sock")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def byte_job() -> Iterator[ByteJob]:
    base = tempfile.mkdtemp(prefix="gpumon-test-", dir="/tmp")
    cwd = os.path.join(os.fsencode(base), b"dir\xff")
    os.mkdir(cwd)
    job = ByteJob(os.path.join(base, "s"), cwd)
    try:
        job.event("ready")
        job.wait_socket()
        yield job
    finally:
        job.stop()
        shutil.rmtree(base, ignore_errors=True)


def gpumon(*args: str, sock_dir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(sock_dir),
        cwd=REPO_ROOT,
    )


def test_a_job_with_undecodable_argv_cwd_and_env_bytes_still_greets_with_them_written_out(byte_job: ByteJob) -> None:
    conn = HookConnection(byte_job.socket_path, timeout=10.0)
    try:
        hello = conn.hello
        assert hello["argv"][1:] == ["arg\\xff", "\\xff\N{BOX DRAWINGS LIGHT HORIZONTAL}"]
        assert hello["cwd"].endswith("/dir\\xff")
        assert hello["dist"]["master_addr"] == "host\\xfe"
        assert hello["dist"]["run_id"] == "run\\xfd"
        state = conn.request({"type": protocol.GET_STATE, "id": "s"}, (protocol.STATE,))
        assert state["type"] == protocol.STATE
    finally:
        conn.sock.close()

    sock_dir = os.path.dirname(byte_job.socket_path)
    attach = gpumon("attach", str(byte_job.pid), "--json", "--duration", "1", sock_dir=sock_dir)
    assert attach.returncode == 0, attach.stderr
    first = json.loads(attach.stdout.splitlines()[0])
    assert first["argv"][1] == "arg\\xff"
    jobs = gpumon("jobs", "--json", "--socket-dir", sock_dir, sock_dir=sock_dir)
    assert jobs.returncode == 0, jobs.stderr
    assert json.loads(jobs.stdout.splitlines()[0])["jobs"][0]["argv"][1] == "arg\\xff"


def test_attach_json_to_a_reader_that_left_is_a_quiet_exit_141(byte_job: ByteJob) -> None:
    """`attach --json`'s broken pipe exits non-zero (141) with nothing on stderr (it exited 0)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "attach", str(byte_job.pid), "--json", "--duration", "5"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=job_env(os.path.dirname(byte_job.socket_path)),
            cwd=REPO_ROOT,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""
