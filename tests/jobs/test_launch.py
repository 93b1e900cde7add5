"""LaunchedJob: a real hooked job started, followed and stopped as a whole; an unsafe socket directory replaced by a
private one (and `gpumon run` saying so); bad knobs and missing commands as one-line LaunchErrors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon import protocol
from gpumon.jobs.launch import LaunchedJob, LaunchError
from tests.attach.attach_helpers import HOOKED_JOB, REPO_ROOT, group_alive, job_env, wait_until

TRAIN = [sys.executable, str(HOOKED_JOB), "--no-import"]


@pytest.fixture
def hostile_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """GPUMON_SOCKET_DIR pointing at a world-writable directory: the hook must not serve there."""
    base = tempfile.mkdtemp(prefix="gpumon-hostile-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory)
    os.chmod(directory, 0o777)
    env = job_env(directory)
    for name in (protocol.SOCKET_DIR_ENV, "PYTHONPATH", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv(protocol.KNOBS_ENV, raising=False)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


def test_an_unsafe_socket_dir_is_replaced_by_a_private_one_the_job_is_found_in(
    hostile_dir: str, tmp_path: Path
) -> None:
    log = tmp_path / "job.log"
    with LaunchedJob([*TRAIN, "--seconds", "60", "--workers", "1"], log=log) as launched:
        assert launched.refused_dir == f"{hostile_dir} has mode 0777, not 0700"
        private = launched.socket_dir
        assert private != hostile_dir and protocol.unsafe_dir_reason(private) is None
        assert launched.env[protocol.SOCKET_DIR_ENV] == private
        job = launched.follow()
        job.start()
        try:
            assert wait_until(lambda: bool(job.view().steps), 60, step=0.1), log.read_text()
            view = job.view()
            assert view.pid == launched.pid and not view.ended
            assert os.path.exists(os.path.join(private, f"{launched.pid}.sock"))
            assert os.listdir(hostile_dir) == []
        finally:
            job.stop()
        pid = launched.pid
    assert not os.path.exists(private), "the private directory goes with the job"
    assert wait_until(lambda: not group_alive(pid), 10), "the job and its DataLoader worker are gone"


def test_gpumon_run_says_what_it_refused_and_the_job_still_runs_hooked(hostile_dir: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "run", "--no-tui", "--", *TRAIN, "--steps", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if line.startswith("gpumon:")]
    refused = f"gpumon: refused the socket directory: {hostile_dir} has mode 0777, not 0700; the job serves in "
    assert len(notes) == 1 and notes[0].startswith(refused) and notes[0].endswith(" instead"), done.stderr
    private = notes[0][len(refused) : -len(" instead")]
    assert os.path.basename(private).startswith(f"gpumon-{os.getuid()}-") and not os.path.exists(private)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events[0]["event"] == "ready" and events[0]["hooked"] is True


def test_stop_ends_the_whole_group_with_the_sigint_ladder(hostile_dir: str, tmp_path: Path) -> None:
    launched = LaunchedJob([*TRAIN, "--seconds", "60", "--workers", "2"], log=tmp_path / "job.log").start()
    try:
        job = launched.follow()
        job.start()
        assert wait_until(lambda: bool(job.view().steps), 60, step=0.1)
        job.stop()
        assert launched.stop(grace=5.0) in (-2, 130, 1), "SIGINT (its Ctrl+C) stopped it"
        assert wait_until(lambda: not group_alive(launched.pid), 10)
    finally:
        launched.close()


def test_bad_knobs_and_missing_commands_are_one_line_launch_errors() -> None:
    with pytest.raises(LaunchError, match=r"bad knob: .*num_workers"):
        LaunchedJob(["true"], knobs={"num_workers": "many"})
    with pytest.raises(LaunchError, match="command not found: no-such-command-xyz"):
        LaunchedJob(["no-such-command-xyz"]).start()
    with pytest.raises(LaunchError, match="no command"):
        LaunchedJob([])


def test_knobs_reach_the_job_validated_and_other_names_pass_through() -> None:
    job = LaunchedJob(["true"], knobs={"num_workers": 2, "batch_size": 16})
    assert json.loads(job.env[protocol.KNOBS_ENV]) == {"num_workers": 2, "batch_size": 16}
    assert job.env[protocol.HOOK_ENV] == "1"
    with job:
        assert job.wait() == 0
