"""Discovery: real hooked CPU jobs found by their sockets, stale sockets removed, unsafe places left alone, DDP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from typing import Any

import pytest
from attach_helpers import HOOKED_JOB, job_env, wait_until

from gpumon import protocol
from gpumon.jobs.discovery import jobs_launched_by, scan
from gpumon.jobs.job_info import JobInfo, group_jobs
from gpumon.jobs.jobstate import RankSummary, find_straggler
from gpumon.jobs.procfs import descends_from
from gpumon.jobs.session import AttachedJob
from tests.stand_in_hook import StandInHook

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def leave_socket_file(path: str) -> None:
    """A socket file nobody listens on any more (what a killed job leaves behind)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()


def test_scan_finds_each_hooked_job_with_its_hello(start_job: Any) -> None:
    first = start_job("--seconds", "30")
    second = start_job("--seconds", "30", "--workers", "1")
    first.wait_socket()
    second.wait_socket()
    found = scan()
    assert sorted(job.pid for job in found.jobs) == sorted([first.pid, second.pid])
    job = found.job(second.pid)
    assert job is not None
    assert job.socket_path == second.socket_path
    assert job.argv[0].endswith("hooked_train.py") and "--workers" in job.argv
    assert job.cwd == os.getcwd()
    assert job.ppid == os.getpid()
    assert job.compatible and job.hello["torch"]
    assert job.group_key is None
    assert [group.pids for group in found.groups] == [[pid] for pid in sorted([first.pid, second.pid])]
    assert found.removed == () and found.unreachable == ()


def test_stale_sockets_are_removed_and_live_ones_kept(start_job: Any, sock_dir: str) -> None:
    job = start_job("--seconds", "30")
    job.wait_socket()
    of_dead_pid = os.path.join(sock_dir, f"{dead_pid()}.sock")
    leave_socket_file(of_dead_pid)
    # A live pid (ours) that serves nothing: the pid was reused after its job died.
    of_reused_pid = os.path.join(sock_dir, f"{os.getpid()}.sock")
    leave_socket_file(of_reused_pid)
    found = scan()
    assert sorted(found.removed) == sorted([of_dead_pid, of_reused_pid])
    assert not os.path.exists(of_dead_pid) and not os.path.exists(of_reused_pid)
    assert [j.pid for j in found.jobs] == [job.pid]
    assert os.path.exists(job.socket_path)


@needs_root
def test_a_socket_file_of_another_uid_is_never_removed(sock_dir: str) -> None:
    path = os.path.join(sock_dir, f"{dead_pid()}.sock")
    leave_socket_file(path)
    os.chown(path, NOBODY, NOBODY)
    found = scan()
    assert found.removed == ()
    assert os.path.exists(path)


def test_a_directory_open_to_others_is_not_read(sock_dir: str) -> None:
    path = os.path.join(sock_dir, f"{dead_pid()}.sock")
    leave_socket_file(path)
    os.chmod(sock_dir, 0o755)
    assert scan().removed == ()
    assert os.path.exists(path)


@needs_root
def test_a_directory_owned_by_another_uid_is_not_read(sock_dir: str) -> None:
    path = os.path.join(sock_dir, f"{dead_pid()}.sock")
    leave_socket_file(path)
    os.chown(sock_dir, NOBODY, NOBODY)
    assert scan().removed == ()
    assert os.path.exists(path)


def hello(pid: int, **dist: Any) -> JobInfo:
    return JobInfo.of(
        pid,
        f"/x/{pid}.sock",
        {
            "type": "hello",
            "protocol": 1,
            "pid": pid,
            "ppid": dist.pop("ppid", 1),
            "argv": ["train.py"],
            "dist": dist,
        },
    )


def test_grouping_by_run_id_rendezvous_and_launcher() -> None:
    jobs = [
        hello(10, rank=1, world_size=2, run_id="abc", master_port="29500"),
        hello(11, rank=0, world_size=2, run_id="abc", master_port="29500"),
        hello(20, rank=0, world_size=2, master_addr="127.0.0.1", master_port="29600"),
        hello(21, rank=1, world_size=2, master_addr="127.0.0.1", master_port="29600"),
        hello(30, rank=0, world_size=2, ppid=7),
        hello(31, rank=1, world_size=2, ppid=7),
        hello(40, rank=0, world_size=1, run_id="solo"),
        hello(50),
    ]
    groups = group_jobs(jobs)
    assert [group.pids for group in groups] == [[11, 10], [20, 21], [30, 31], [40], [50]]
    assert [group.distributed for group in groups] == [True, True, True, False, False]
    assert "torchrun run abc: ranks 0,1 of 2" in groups[0].label
    assert groups[0].primary.pid == 11


def test_straggler_rules() -> None:
    def rank(pid: int, wall: float, data: float) -> RankSummary:
        return RankSummary(
            rank=pid, pid=pid, steps_per_s=1e3 / wall, wall_ms=wall, data_ms=data, gpu_ms=None, ended=False
        )

    assert find_straggler([rank(1, 10, 1), rank(2, 10.5, 1), rank(3, 20, 1)]) == 3  # unsynchronised: slowest
    assert find_straggler([rank(1, 10, 1), rank(2, 10, 6), rank(3, 10, 1)]) == 2  # in lockstep: data-starved
    assert find_straggler([rank(1, 10, 1), rank(2, 10.4, 1.2)]) is None
    assert find_straggler([rank(1, 10, 1)]) is None


def test_ddp_ranks_are_grouped_and_the_slow_one_is_the_straggler(start_job: Any) -> None:
    shared = {
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "attach-test",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
    }
    fast = start_job("--seconds", "30", "--item-sleep-ms", "0.5", env={**shared, "RANK": "0", "LOCAL_RANK": "0"})
    slow = start_job(
        "--seconds",
        "30",
        "--item-sleep-ms",
        "0.5",
        "--step-sleep-ms",
        "50",
        env={**shared, "RANK": "1", "LOCAL_RANK": "1"},
    )
    for job in (fast, slow):
        job.wait_socket()
    groups = scan().groups
    ddp = next(group for group in groups if group.distributed)
    assert ddp.pids == [fast.pid, slow.pid]
    assert [job.rank for job in ddp.jobs] == [0, 1] and ddp.world_size == 2
    assert ddp.key == ("run_id", "attach-test", "127.0.0.1", "29999")
    assert len(groups) == 1

    job = AttachedJob.for_pid(slow.pid)
    assert job is not None
    try:
        job.start()
        assert sorted(c.pid for c in job.clients) == [fast.pid, slow.pid]

        def both_ranks_measured() -> bool:
            views = {client.pid: client.view() for client in job.clients}
            return views[fast.pid].stats.steps >= 20 and views[slow.pid].stats.steps >= 10

        assert wait_until(both_ranks_measured, 30), job.view().ranks
        view = job.view()
        assert view.pid == slow.pid  # the pid asked for is the primary
        assert view.straggler == slow.pid, view.ranks
        walls = {r.pid: r.wall_ms for r in view.ranks}
        assert walls[slow.pid] > 1.5 * walls[fast.pid]
    finally:
        job.stop()


def test_jobs_launched_by_a_process_are_its_hooked_descendants(start_job: Any, sock_dir: str) -> None:
    """What `gpumon run` follows: a launcher (like torchrun) whose child is the hooked job."""
    launcher_code = "import subprocess, sys; subprocess.run([sys.executable, sys.argv[1], '--seconds', '30'])"
    launcher = subprocess.Popen(
        [sys.executable, "-c", launcher_code, str(HOOKED_JOB)],
        env=job_env(sock_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    other = start_job("--seconds", "30")
    try:
        other.wait_socket()
        assert wait_until(lambda: len(protocol.list_sockets()) == 2, 30)
        found = jobs_launched_by(launcher.pid)
        assert len(found.jobs) == 1
        child = found.jobs[0]
        assert child.pid != launcher.pid and descends_from(child.pid, launcher.pid)
        assert not descends_from(other.pid, launcher.pid)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


@needs_root
def test_root_attaches_to_another_users_job_and_touches_none_of_its_files(sock_dir: str) -> None:
    """Root watching a job of user nobody: the job's own (nobody's) socket directory is read; a stale socket in it
    is left alone. A stand-in hook run as nobody serves for its own pid, as the job's hook would."""
    os.chmod(os.path.dirname(sock_dir), 0o755)  # nobody reaches its directory through the test's base directory
    os.chown(sock_dir, NOBODY, NOBODY)
    stale = os.path.join(sock_dir, f"{dead_pid()}.sock")
    leave_socket_file(stale)
    os.chown(stale, NOBODY, NOBODY)
    theirs = StandInHook(sock_dir, uid=NOBODY, hello={"argv": ["theirs.py"]})
    try:
        job = AttachedJob.for_pid(theirs.pid)
        assert job is not None and job.pid == theirs.pid
        assert job.clients[0].state.info is not None and job.clients[0].state.info.argv == ["theirs.py"]
        job.stop()
        assert os.path.exists(stale)  # not ours to clean
    finally:
        theirs.stop()
