"""`gpumon experiment --pid` on a real hooked job stopped with SIGSTOP mid-variant: the knob is put back once the job
answers again (SIGCONT), or named as left changed when it never does in time; either way the exit status says the
run failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from advisor_support import REPO

from gpumon import protocol
from gpumon.advisor import session
from gpumon.advisor.live import current_value
from gpumon.cli import main
from gpumon.jobs.client import JobClient

PLAIN = [sys.executable, str(Path(__file__).parent / "jobs" / "plain_train.py"), "--seconds", "180"]
EXPERIMENT = ["--try", "num_workers=2", "--window", "1", "--repeats", "2", "--warmup", "1"]


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[subprocess.Popen[bytes]]:
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, str(tmp_path / "sockets"))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        PLAIN,
        env=protocol.injection_env(env),
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(protocol.socket_path(process.pid)):
            assert process.poll() is None and time.monotonic() < deadline, "the job never opened its socket"
            time.sleep(0.05)
        yield process
    finally:
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def stall_mid_variant(
    monkeypatch: pytest.MonkeyPatch, job: subprocess.Popen[bytes], *, resume: bool, restore_timeout_s: float
) -> list[str]:
    """Make `gpumon experiment --pid` stop the job's process group as its variant starts warming up and, with
    `resume`, continue it once the run's end asks the job again to take its knob back; the progress lines said."""
    said: list[str] = []
    original = session.experiment_pid

    def stalling(pid: int, *, progress: Any, **options: Any) -> Any:
        def watched(message: str, fraction: float) -> None:
            said.append(message)
            progress(message, fraction)
            if "warming up" in message and not message.startswith("baseline"):
                os.killpg(job.pid, signal.SIGSTOP)
            if resume and "does not answer" in message:
                os.killpg(job.pid, signal.SIGCONT)

        return original(pid, progress=watched, answer_timeout_s=1.0, restore_timeout_s=restore_timeout_s, **options)

    monkeypatch.setattr(session, "experiment_pid", stalling)
    return said


def workers_now(pid: int, timeout: float = 20.0) -> Any:
    """num_workers as the job's hook reports it, once the job's state has been read."""
    client = JobClient(pid)
    client.connect()
    client.start()
    try:
        deadline = time.monotonic() + timeout
        while (value := current_value(client.view(), "num_workers")) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return value
    finally:
        client.stop()


def test_a_job_stopped_mid_variant_gets_its_knob_back_once_it_answers_again(
    job: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    said = stall_mid_variant(monkeypatch, job, resume=True, restore_timeout_s=60.0)
    code = main(["experiment", "--pid", str(job.pid), *EXPERIMENT])
    out, err = capsys.readouterr()
    assert code == 1, f"a failed variant is a failed run\n{out}\n{err}"
    assert "failed" in out and "stalled" in out, out
    assert any("does not answer" in line for line in said), said
    assert any("put back" in line for line in said), said
    assert "not put back" not in out and "did not take back" not in err, (out, err)
    deadline = time.monotonic() + 30
    while (workers := workers_now(job.pid)) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert workers == 0, "the job is back on its own num_workers"


def test_a_job_that_never_answers_in_time_has_each_knob_left_changed_named(
    job: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stall_mid_variant(monkeypatch, job, resume=False, restore_timeout_s=2.0)
    code = main(["experiment", "--pid", str(job.pid), "--json", *EXPERIMENT])
    out, err = capsys.readouterr()
    assert code == 1, err
    report = json.loads(out)
    assert report["unrestored"] == [{"knob": "num_workers", "left": 2, "should_be": 0}], report["unrestored"]
    assert f"gpumon: pid {job.pid} did not take back num_workers left at 2 (should be 0)" in err.splitlines(), err
    assert report["stopped"].startswith("the job stopped answering"), report["stopped"]
