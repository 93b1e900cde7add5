"""`gpumon run --no-tui`, `gpumon attach --json`, `gpumon jobs` and the one-line errors, as a user runs them."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from attach_helpers import HOOKED_JOB, REPO_ROOT, group_alive, job_env, wait_until

from gpumon.jobs.pyspy.target import find_pyspy

GPUMON = [sys.executable, "-m", "gpumon"]


def gpumon(*args: str, sock_dir: str, timeout: float = 60, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUMON, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=job_env(sock_dir),
        cwd=REPO_ROOT,
        **options,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_run_no_tui_injects_the_hook_and_passes_the_exit_code_through(sock_dir: str) -> None:
    done = gpumon(
        "run",
        "--no-tui",
        "--",
        sys.executable,
        str(HOOKED_JOB),
        "--no-import",
        "--steps",
        "20",
        "--exit-code",
        "3",
        sock_dir=sock_dir,
    )
    assert done.returncode == 3, done.stderr
    events = [e for e in json_lines(done.stdout) if "event" in e]
    assert events[0] == {"event": "ready", "pid": events[0]["pid"], "hooked": True}
    assert events[-1]["event"] == "done" and events[-1]["hooked"] is True and events[-1]["steps"] == 20
    assert os.listdir(sock_dir) == []  # the job removed its socket at exit


def test_run_without_a_command_or_with_a_missing_one_is_a_one_line_error(sock_dir: str) -> None:
    for args, message, status in (
        ([], "gpumon run needs a command", 2),
        (["--", "no-such-command-xyz"], "command not found: no-such-command-xyz", 127),
    ):
        done = gpumon("run", "--no-tui", *args, sock_dir=sock_dir)
        assert done.returncode == status
        assert done.stderr.strip().splitlines() == [f"gpumon: error: {message}"] or message in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("started_ignoring_sigint", [False, True], ids=["foreground", "background-shell"])
def test_ctrl_c_reaches_the_job_and_leaves_no_process_behind(sock_dir: str, started_ignoring_sigint: bool) -> None:
    # A shell without job control starts `gpumon run ... &` with SIGINT ignored; the job must still get Ctrl+C.
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if started_ignoring_sigint else None
    proc = subprocess.Popen(
        [
            *GPUMON,
            "run",
            "--no-tui",
            "--",
            sys.executable,
            str(HOOKED_JOB),
            "--no-import",
            "--seconds",
            "60",
            "--workers",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=job_env(sock_dir),
        cwd=REPO_ROOT,
        start_new_session=True,
        preexec_fn=ignore,
    )
    try:
        assert proc.stdout is not None
        ready = json.loads(proc.stdout.readline())
        job_pid = ready["pid"]
        assert ready["hooked"] is True
        assert os.getpgid(job_pid) == job_pid  # the job leads its own process group, workers in it
        proc.send_signal(signal.SIGINT)  # what Ctrl+C in the terminal does to gpumon
        assert proc.wait(30) == 128 + signal.SIGINT
        assert wait_until(lambda: not group_alive(job_pid), 10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_attach_json_prints_the_hello_then_steps_and_state(watch_shared: Any) -> None:
    job = watch_shared
    started = time.monotonic()
    done = gpumon("attach", str(job.pid), "--json", "--duration", "1.5", sock_dir=job.sock_dir)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    messages = json_lines(done.stdout)
    assert messages[0]["type"] == "hello" and messages[0]["pid"] == job.pid
    kinds = {m["type"] for m in messages[1:]}
    assert {"steps", "state"} <= kinds and "hello" not in kinds and "subscribed" not in kinds
    seqs = [r["seq"] for m in messages if m["type"] == "steps" for r in m["records"]]
    assert seqs == sorted(seqs) and len(seqs) > 10
    assert 1.5 <= elapsed < 15
    # Each state carries the step model; null here: a CPU job has no GPU state for the sampler to read.
    assert all("step_model" in m and m["step_model"] is None for m in messages if m["type"] == "state")
    assert not any("step_model" in m for m in messages if m["type"] != "state")


def test_attach_json_stops_when_the_job_ends(start_job: Any, sock_dir: str) -> None:
    job = start_job("--seconds", "1")
    job.event("ready")
    done = gpumon("attach", str(job.pid), "--json", sock_dir=sock_dir)
    assert done.returncode == 0, done.stderr
    messages = json_lines(done.stdout)
    assert messages[-2]["type"] == "bye"
    assert messages[-1] == {"type": "ended", "pid": job.pid, "reason": "exit"}


def test_attach_errors_are_one_line_with_exit_code_2(sock_dir: str) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        cases = [
            (str(gone.pid), f"gpumon: error: no process with pid {gone.pid}"),
            (str(sleeper.pid), f"gpumon: error: pid {sleeper.pid} (sleep) is not a Python process"),
        ]
        for pid, message in cases:
            done = gpumon("attach", pid, sock_dir=sock_dir)
            assert done.returncode == 2
            assert done.stderr.strip() == message
            assert done.stdout == ""
        done = gpumon("attach", "abc", sock_dir=sock_dir)
        assert done.returncode == 2 and "'abc' is not a process id" in done.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")
def test_attach_json_without_the_hook_prints_py_spy_estimates(shared_spy_job: Any, sock_dir: str) -> None:
    job = shared_spy_job
    done = gpumon("attach", str(job.pid), "--json", "--duration", "3", sock_dir=sock_dir)
    if done.returncode == 2 and "permission" in done.stderr:
        pytest.skip(f"py-spy cannot attach here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    messages = json_lines(done.stdout)
    assert messages[0] == {
        "type": "attach",
        "pid": job.pid,
        "hooked": False,
        "method": "py-spy",
        "estimate": True,
        "command": messages[0]["command"],
    }
    estimates = [m for m in messages if m["type"] == "estimate"]
    assert len(estimates) >= 2 and all(m["estimate"] is True for m in estimates)
    last = estimates[-1]
    assert last["samples"] >= 50 and last["rounds"] == len(estimates)
    assert max(last["fractions"], key=last["fractions"].get) == "data_wait"
    assert last["fractions"]["data_wait"] > 0.7, last["counts"]
    assert (
        "dataloader.py" in last["hot_frames"]["data_wait"]
        or "queues.py" in last["hot_frames"]["data_wait"]
        or "selectors.py" in last["hot_frames"]["data_wait"]
    )


RUNUSER = shutil.which("runuser")


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")
@pytest.mark.skipif(os.geteuid() != 0 or RUNUSER is None, reason="acting as another user needs root and runuser")
def test_attach_to_another_users_job_says_only_its_owner_or_root_can_watch_it(
    shared_spy_job: Any, sock_dir: str
) -> None:
    """nobody attaching to root's job: no setcap or ptrace_scope lets it, so none is advised."""
    job = shared_spy_job
    pyspy = find_pyspy()
    assert pyspy is not None
    env = job_env(sock_dir)
    env.pop("GPUMON_SOCKET_DIR")
    env["HOME"] = "/tmp"
    env["PATH"] = os.pathsep.join([os.path.dirname(pyspy), env.get("PATH", "")])
    as_nobody = [RUNUSER, "-u", "nobody", "--"]
    # The attach path is stdlib only: any Python >= 3.10 that nobody may run will do (a venv under /root will not).
    python = None
    for candidate in (sys.executable, "/usr/bin/python3"):
        check = subprocess.run(
            [*as_nobody, candidate, "-c", "import gpumon.cli, gpumon.jobs"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd="/tmp",
        )
        if check.returncode == 0:
            python = candidate
            break
    if python is None:
        pytest.skip("user nobody can run no Python that imports this checkout's gpumon")
    done = subprocess.run(
        [*as_nobody, python, "-m", "gpumon", "attach", str(job.pid)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd="/tmp",
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    owner = pwd.getpwuid(os.stat(f"/proc/{job.pid}").st_uid).pw_name
    assert line.startswith(f"gpumon: error: pid {job.pid} belongs to {owner}: only its owner or root can watch it")
    assert "setcap" not in line and "ptrace_scope" not in line


def test_jobs_lists_hooked_jobs_and_groups_ranks(start_job: Any, sock_dir: str) -> None:
    shared = {"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "cli-test", "MASTER_PORT": "29998"}
    ranks = [start_job("--seconds", "30", env={**shared, "RANK": str(r)}) for r in (0, 1)]
    for job in ranks:
        job.wait_socket()
    done = gpumon("jobs", sock_dir=sock_dir)
    assert done.returncode == 0, done.stderr
    assert f"torchrun run cli-test: ranks 0,1 of 2 (pids {ranks[0].pid}, {ranks[1].pid})" in done.stdout
    listed = json_lines(gpumon("jobs", "--json", sock_dir=sock_dir).stdout)
    assert len(listed) == 1 and [j["pid"] for j in listed[0]["jobs"]] == [ranks[0].pid, ranks[1].pid]
    for job in ranks:
        job.kill()
    assert wait_until(lambda: "no hooked jobs" in gpumon("jobs", sock_dir=sock_dir).stdout, 10)
