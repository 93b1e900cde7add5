"""`gpumon profile` and `gpumon diagnose --profile` on real hooked CPU jobs: the trace file, its summary, and the
one-line refusals (busy, an unsafe directory, a job that runs its own profiler, no hook)."""

from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from attach_helpers import JOBS, REPO_ROOT, job_env

from gpumon import protocol
from gpumon.jobs.client import JobClient, JobRequestError

GPUMON = [sys.executable, "-m", "gpumon"]
OWN_PROFILER_JOB = JOBS / "own_profiler_train.py"


def gpumon(*args: str, sock_dir: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUMON, *args], capture_output=True, text=True, timeout=timeout, env=job_env(sock_dir), cwd=REPO_ROOT
    )


def step_marks(trace: dict[str, Any]) -> list[str]:
    return [
        e["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")
    ]


def test_profile_writes_a_private_trace_that_opens_and_summarizes(
    start_job: Any, sock_dir: str, tmp_path: Path
) -> None:
    job = start_job("--seconds", "120")
    job.event("ready")
    out = tmp_path / "traces"
    done = gpumon("profile", str(job.pid), "--steps", "4", "--out", str(out), "--json", sock_dir=sock_dir)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    result, summary = report["result"], report["summary"]
    assert result["available"] is True and result["steps"] == 4 and result["cuda"] is False
    path = Path(result["path"])
    assert path.parent == out and path.name.startswith(f"{job.pid}-") and path.name.endswith(".trace.json.gz")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(out.stat().st_mode) == 0o700
    assert result["bytes"] == path.stat().st_size
    assert os.listdir(out) == [path.name]  # no temporary file left behind
    with gzip.open(path, "rt") as stream:
        trace = json.load(stream)
    assert trace["traceEvents"]
    marks = step_marks(trace)
    assert len(marks) == 4 and summary["steps"] == 4
    assert any(e.get("cat") == "cpu_op" and e.get("name") == "aten::addmm" for e in trace["traceEvents"])
    assert summary["cuda"] is False and summary["kernels"] == 0
    assert f"profiling 4 steps of pid {job.pid}" in done.stderr

    text = gpumon("profile", str(job.pid), "--steps", "2", "--out", str(out), sock_dir=sock_dir)
    assert text.returncode == 0, text.stderr
    assert "steps captured: 2" in text.stdout and "no CUDA kernels" in text.stdout
    assert len(os.listdir(out)) == 2  # each capture its own file

    client = JobClient(job.pid)
    client.connect()
    client.start()
    try:
        state = client.get_state()
        assert state["hook"]["errors"] == 0, state["hook"].get("last_error")
        before = state["last_seq"]
        assert client.ping()
    finally:
        client.stop()
    assert job.proc.poll() is None and before > 6  # the job trains on


def test_a_second_capture_while_one_runs_is_busy_and_a_bad_request_is_refused(start_job: Any, tmp_path: Path) -> None:
    job = start_job("--seconds", "120", "--step-sleep-ms", "20")
    job.event("ready")
    client = JobClient(job.pid)
    client.connect()
    client.start()
    try:
        outcome: dict[str, Any] = {}
        started = threading.Event()
        worker = threading.Thread(
            target=lambda: outcome.update(
                client.profile(20, str(tmp_path / "t"), timeout=60, on_started=lambda _reply: started.set())
            )
        )
        worker.start()
        assert started.wait(30)
        busy = None
        try:
            client.profile(1, str(tmp_path / "t"), timeout=30)
        except JobRequestError as error:
            busy = error
        assert busy is not None and busy.code == protocol.E_BUSY, busy
        worker.join(60)
        assert outcome["available"] is True and outcome["steps"] == 20
        for request, message in (
            ({"type": protocol.PROFILE, "steps": 0}, "steps must be 1..100"),
            ({"type": protocol.PROFILE, "steps": 101}, "steps must be 1..100"),
            ({"type": protocol.PROFILE, "steps": 2, "dir": "relative/dir"}, "absolute path"),
            ({"type": protocol.PROFILE, "steps": "2"}, "wrong type"),
        ):
            try:
                client.request(request, (protocol.PROFILING,), timeout=10)
                raise AssertionError(f"{request} was accepted")
            except JobRequestError as error:
                assert message in str(error) and error.code == protocol.E_BAD_MESSAGE
        after = client.profile(1, str(tmp_path / "t"), timeout=30)  # not busy any more
        assert after["available"] is True
    finally:
        client.stop()


def test_an_unsafe_directory_is_one_line_and_the_job_goes_on(start_job: Any, sock_dir: str, tmp_path: Path) -> None:
    job = start_job("--seconds", "120")
    job.event("ready")
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    done = gpumon("profile", str(job.pid), "--steps", "2", "--out", str(link), sock_dir=sock_dir)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "is a symlink" in done.stderr and "Traceback" not in done.stderr
    assert os.listdir(real) == []
    again = gpumon("profile", str(job.pid), "--steps", "2", "--out", str(real), sock_dir=sock_dir)
    assert again.returncode == 0, again.stderr
    assert job.proc.poll() is None


def test_profile_out_leaves_an_existing_directory_as_it_is(start_job: Any, sock_dir: str, tmp_path: Path) -> None:
    """`mkdir -m755 d; gpumon profile PID --out d` used to leave d at 0700; a directory others may write (like /tmp)
    is refused in one line and left as it is too."""
    job = start_job("--seconds", "120")
    job.event("ready")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    done = gpumon("profile", str(job.pid), "--steps", "2", "--out", str(shared), "--json", sock_dir=sock_dir)
    assert done.returncode == 0, done.stderr
    (trace,) = shared.iterdir()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755 and stat.S_IMODE(trace.stat().st_mode) == 0o600
    like_tmp = tmp_path / "like-tmp"
    like_tmp.mkdir()
    like_tmp.chmod(0o1777)
    refused = gpumon("profile", str(job.pid), "--steps", "2", "--out", str(like_tmp), sock_dir=sock_dir)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (
        f"gpumon: error: pid {job.pid}: no profiler capture: cannot write the trace: {like_tmp} is writable by "
        "others (mode 1777)\n"
    )
    assert stat.S_IMODE(like_tmp.stat().st_mode) == 0o1777 and os.listdir(like_tmp) == []
    assert job.proc.poll() is None


def test_a_raw_profile_request_never_chmods_the_directory_it_names(start_job: Any, tmp_path: Path) -> None:
    """A client's `profile` request names any directory: the hook writes its trace there only when the directory is
    the job's own and nobody else may write in it, and changes the mode or owner of none."""
    job = start_job("--seconds", "120")
    job.event("ready")
    like_etc = tmp_path / "like-etc"
    like_etc.mkdir()
    like_etc.chmod(0o755)
    like_tmp = tmp_path / "like-tmp"
    like_tmp.mkdir()
    like_tmp.chmod(0o1777)
    group_writable = tmp_path / "group-writable"
    group_writable.mkdir()
    group_writable.chmod(0o770)
    refusals = {
        like_tmp: f"{like_tmp} is writable by others (mode 1777)",
        group_writable: f"{group_writable} is writable by others (mode 0770)",
    }
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        refusals[theirs] = f"{theirs} is owned by uid 65534, not 0"
    before = {path: (path.stat().st_uid, path.stat().st_mode) for path in [like_etc, *refusals]}
    client = JobClient(job.pid)
    client.connect()
    client.start()
    try:
        written = client.profile(1, str(like_etc), timeout=60)
        assert written["available"] is True and Path(written["path"]).parent == like_etc
        for directory, reason in refusals.items():
            try:
                client.request({"type": protocol.PROFILE, "steps": 1, "dir": str(directory)}, (protocol.PROFILING,))
                raise AssertionError(f"a capture into {directory} was accepted")
            except JobRequestError as error:
                assert error.code == protocol.E_BAD_MESSAGE and str(error) == f"cannot write the trace: {reason}"
            assert os.listdir(directory) == []
    finally:
        client.stop()
    assert {path: (path.stat().st_uid, path.stat().st_mode) for path in before} == before
    assert job.proc.poll() is None


def test_a_job_running_its_own_profiler_gets_one_clear_line(start_job: Any, sock_dir: str, tmp_path: Path) -> None:
    job = start_job("60", script=OWN_PROFILER_JOB)
    job.event("ready")
    done = gpumon("profile", str(job.pid), "--steps", "2", "--out", str(tmp_path / "t"), sock_dir=sock_dir)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    progress, error = done.stderr.splitlines()
    assert progress.startswith(f"gpumon: profiling 2 steps of pid {job.pid}")
    assert error == (
        f"gpumon: error: pid {job.pid}: no profiler capture: the job is running a profiler of its own "
        "(torch allows one at a time)"
    )
    assert job.proc.poll() is None and os.listdir(tmp_path / "t") == []


def test_profile_of_a_process_without_the_hook_is_one_line(sock_dir: str) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        done = gpumon("profile", str(sleeper.pid), "--steps", "2", sock_dir=sock_dir)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "no gpumon hook socket" in done.stderr and "needs the gpumon hook" in done.stderr
    bad = gpumon("profile", "123", "--steps", "101", sock_dir=sock_dir)
    assert bad.returncode == 2 and "outside 1..100" in bad.stderr


def test_diagnose_with_profile_adds_the_capture(start_job: Any, sock_dir: str, tmp_path: Path) -> None:
    job = start_job("--seconds", "120")
    job.event("ready")
    env_cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [*GPUMON, "diagnose", "--pid", str(job.pid), "--duration", "2", "--profile", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(sock_dir, env_cache),
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    capture = report["capture"]
    assert capture["result"]["available"] and capture["summary"]["steps"] == 3 and not capture["summary"]["cuda"]
    assert Path(capture["result"]["path"]).parent == tmp_path / "cache" / "gpumon" / "traces"
    assert report["signals"]["capture_steps"] == 3 and report["signals"]["comm_exposed_ms_per_step"] is None
    assert "capture_error" not in report
    refused = gpumon("diagnose", "--profile", "3", "--", "python", "x.py", sock_dir=sock_dir)
    assert refused.returncode == 2 and "--profile goes with --pid" in refused.stderr
