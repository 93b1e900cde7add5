"""`gpumon diagnose --pid` on a real hooked job killed part-way through the window: the output says when the job
exited (text and JSON) and the exit status is 1, not a finding from a few seconds passed off as the window's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from advisor_support import REPO

from gpumon import protocol
from gpumon.advisor.rules import Finding
from gpumon.advisor.session import Diagnosis
from gpumon.advisor.signals import Signals
from gpumon.cli import main

PLAIN = [sys.executable, str(Path(__file__).parent / "jobs" / "plain_train.py"), "--seconds", "120"]
KILL_AFTER_S = 3.0
WINDOW_S = 10.0


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_job_killed_mid_window_is_said_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, str(tmp_path / "sockets"))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    job = subprocess.Popen(
        PLAIN,
        env=protocol.injection_env(env),
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killer = threading.Timer(KILL_AFTER_S, lambda: os.killpg(job.pid, signal.SIGKILL))
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(protocol.socket_path(job.pid)):
            assert job.poll() is None and time.monotonic() < deadline, "the job never opened its socket"
            time.sleep(0.05)
        killer.start()
        started = time.monotonic()
        json_flag = ["--json"] if as_json else []
        code = main(["diagnose", "--pid", str(job.pid), "--duration", f"{WINDOW_S:g}", *json_flag])
        took = time.monotonic() - started
    finally:
        killer.cancel()
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert took < WINDOW_S, "the watch stopped when the job died"
    if as_json:
        document = json.loads(out)
        exited = document["job_exited_after_s"]
        assert 0 < exited < KILL_AFTER_S + 2, exited
        # The hook's states and its step records agree that it stepped in the window: no note about missing records.
        assert document["steps_closed_in_window"] > 0 and document["step_records_in_window"] > 0, document
        assert "no step record" not in err
        assert f"the job exited {exited:.0f} s into the window" in err
    else:
        lines = [line for line in out.splitlines() if line.startswith("the job exited ")]
        assert len(lines) == 1 and lines[0].endswith("s into the window: the finding covers only that time"), out


def test_steps_the_hook_closed_without_a_record_arriving_are_said() -> None:
    """Held-out 1053 and 1081 on an H200: the hook stepped through the window, no record of it reached gpumon, and the
    finding came from the samples alone without saying so."""
    finding = Finding("cpu_bound", "cpu", 0.9)
    missing = Diagnosis(finding, Signals.of(), pid=7, steps_closed=9, step_records=0)
    assert missing.records_note is not None and "closed 9 steps" in missing.records_note
    assert missing.to_dict()["steps_closed_in_window"] == 9 and missing.to_dict()["step_records_in_window"] == 0
    assert Diagnosis(finding, Signals.of(), steps_closed=9, step_records=4).records_note is None
    assert Diagnosis(finding, Signals.of(), steps_closed=1, step_records=0).records_note is None
    assert Diagnosis(finding, Signals.of()).records_note is None
