"""Peers are who they claim: a hook socket speaks only for the process it names, run by the socket's owner.

User nobody plants sockets in its own /tmp/gpumon-65534 that claim root's job (live, or dead), or carry the run id
of root's job as a fake rank claiming root's unrelated processes, or claim pid 1 for the exporter. Root's scan,
attach, job kill and exporter must see through each. Making another uid's socket and server needs root here: those
tests are skipped otherwise; a socket named for a pid that does not serve it is refused for every user.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import psutil
import pytest

from gpumon import protocol
from gpumon.exporter.jobs import JobMetrics
from gpumon.jobs.connection import HookConnection
from gpumon.jobs.discovery import read_hello, scan
from gpumon.jobs.peers import SocketClaim, UntrustedHook, check_process
from gpumon.jobs.process_signals import job_targets, send_signal
from gpumon.jobs.session import AttachedJob
from tests.attach.attach_helpers import REPO_ROOT
from tests.stand_in_hook import StandInHook
from tests.waiting import wait_until

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another uid's socket directory and server need root")
RUN = {"run_id": "roots-run", "rank": 0, "world_size": 2, "master_addr": "127.0.0.1", "master_port": "29500"}


@pytest.fixture
def own_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This test's own socket directory, $XDG_RUNTIME_DIR/gpumon: the first place a scan of ours reads."""
    base = tempfile.mkdtemp(prefix="gpumon-peers-", dir="/tmp")
    directory = os.path.join(base, "gpumon")
    os.mkdir(directory, 0o700)
    monkeypatch.delenv(protocol.SOCKET_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", base)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def nobodys_dir() -> Iterator[str]:
    """/tmp/gpumon-65534: user nobody's own socket directory, where nobody plants its sockets."""
    path = f"/tmp/gpumon-{NOBODY}"
    made = not os.path.lexists(path)
    if made:
        os.mkdir(path, 0o700)
        os.chown(path, NOBODY, NOBODY)
    reason = protocol.unsafe_dir_reason(path, NOBODY)
    if reason is not None:
        pytest.skip(f"nobody's socket directory cannot be used here: {reason}")
    yield path
    if made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def roots_job(own_dir: str) -> Iterator[StandInHook]:
    """Root's hooked job (rank 0 of run `roots-run`), serving in root's own directory."""
    job = StandInHook(own_dir, hello={"argv": ["roots-job.py"], "dist": RUN})
    yield job
    job.stop()


@needs_root
def test_a_socket_in_another_users_directory_cannot_speak_for_roots_job(
    roots_job: StandInHook, nobodys_dir: str
) -> None:
    fake = StandInHook(nobodys_dir, uid=NOBODY, name_pid=roots_job.pid, hello={"pid": roots_job.pid, "argv": ["fake"]})
    try:
        found = scan(pids=[roots_job.pid], clean=False)
        assert [(job.pid, job.argv, job.socket_path) for job in found.jobs] == [
            (roots_job.pid, ["roots-job.py"], roots_job.path)
        ]
        assert [pid for pid, _why in found.refused] == [roots_job.pid]
        assert f"uid {NOBODY}" in found.refused[0][1] and "runs as uid 0" in found.refused[0][1]
        with pytest.raises(UntrustedHook):
            read_hello(fake.path)
        attached = AttachedJob.for_pid(roots_job.pid)
        assert attached is not None
        try:
            info = attached.clients[0].state.info
            assert info is not None and info.argv == ["roots-job.py"] and info.socket_path == roots_job.path
        finally:
            attached.stop()
    finally:
        fake.stop()


@needs_root
def test_gpumon_jobs_lists_roots_job_and_says_what_it_ignored(roots_job: StandInHook, nobodys_dir: str) -> None:
    fake = StandInHook(nobodys_dir, uid=NOBODY, name_pid=roots_job.pid, hello={"pid": roots_job.pid, "argv": ["fake"]})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "jobs"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
        )
    finally:
        fake.stop()
    assert done.returncode == 0, done.stderr
    assert f"ranks 0 of 2 (pids {roots_job.pid}): roots-job.py" in done.stdout and "fake" not in done.stdout
    ignored = [line for line in done.stderr.splitlines() if line.startswith(f"pid {roots_job.pid}: ignored a socket")]
    assert len(ignored) == 1 and fake.path in ignored[0], done.stderr


@needs_root
def test_a_socket_for_a_process_of_its_owner_that_does_not_serve_it_is_refused(nobodys_dir: str) -> None:
    """Nobody may not speak for its own other processes either: the server must be the pid the socket names."""
    theirs = subprocess.Popen(["sleep", "300"], user=NOBODY, group=NOBODY, extra_groups=[])
    try:
        wait_until(lambda: psutil.Process(theirs.pid).uids().real == NOBODY, 10, "sleep running as nobody")
        fake = StandInHook(nobodys_dir, uid=NOBODY, name_pid=theirs.pid, hello={"pid": theirs.pid})
        try:
            found = scan(pids=[theirs.pid], clean=False)
            assert found.jobs == () and found.unreachable == ()
            assert found.refused == ((theirs.pid, f"{fake.path} is served by pid {fake.pid}, not by pid {theirs.pid}"),)
        finally:
            fake.stop()
    finally:
        theirs.kill()
        theirs.wait()


@needs_root
def test_a_dead_planted_socket_does_not_hide_the_job(roots_job: StandInHook, nobodys_dir: str) -> None:
    dead = StandInHook(nobodys_dir, uid=NOBODY, name_pid=roots_job.pid, dead=True)
    try:
        found = scan(pids=[roots_job.pid])
        assert [job.pid for job in found.jobs] == [roots_job.pid] and found.unreachable == ()
        attached = AttachedJob.for_pid(roots_job.pid)
        assert attached is not None, "the job's hook, not py-spy"
        attached.stop()
        assert os.path.lexists(dead.path), "another user's socket is never removed"
    finally:
        dead.stop()


@needs_root
def test_a_fake_rank_with_the_jobs_run_id_stays_out_of_its_kill(roots_job: StandInHook, nobodys_dir: str) -> None:
    """Nobody's fake rank 1 of root's run claims root's unrelated bash (two sleeps beneath); another serves for its
    own pid. Neither joins root's job, and killing the whole job leaves bash and its sleeps running."""
    bystander = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"], start_new_session=True)
    fakes: list[StandInHook] = []
    try:
        wait_until(lambda: len(psutil.Process(bystander.pid).children()) == 2, 10, "bash's two sleeps")
        rank_one = {"argv": ["roots-job.py"], "dist": {**RUN, "rank": 1}}
        claim = {**rank_one, "pid": bystander.pid}
        fakes.append(StandInHook(nobodys_dir, uid=NOBODY, name_pid=bystander.pid, hello=claim))
        fakes.append(StandInHook(nobodys_dir, uid=NOBODY, hello=rank_one))
        found = scan(pids=[roots_job.pid, bystander.pid, fakes[1].pid], clean=False)
        group = found.group_of(roots_job.pid)
        assert group is not None and group.pids == [roots_job.pid]
        assert [pid for pid, _why in found.refused] == [bystander.pid]
        ranks = [group.pids for group in found.groups]
        targets = job_targets(roots_job.pid, ranks)
        assert [target.pid for target in targets] == [roots_job.pid]
        listed = job_targets(roots_job.pid, [[roots_job.pid, fakes[1].pid]])  # another user's pid, listed as a rank
        assert [target.pid for target in listed] == [roots_job.pid]
        assert all(result.sent for result in send_signal(targets, signal.SIGTERM))
        wait_until(lambda: roots_job.proc.poll() is not None, 10, "root's job ending on SIGTERM")
        assert bystander.poll() is None
        assert all(child.is_running() for child in psutil.Process(bystander.pid).children())
    finally:
        for fake in fakes:
            fake.stop()
        os.killpg(bystander.pid, signal.SIGKILL)
        bystander.wait()


@needs_root
def test_the_exporter_follows_no_tree_it_could_not_verify(roots_job: StandInHook, nobodys_dir: str) -> None:
    """A socket of nobody's claiming pid 1: the exporter neither follows it nor has the sampler track pid 1's tree."""
    fake = StandInHook(nobodys_dir, uid=NOBODY, name_pid=1, hello={"pid": 1, "argv": ["init"]})
    tracked: list[list[int]] = []
    metrics = JobMetrics(track=lambda pids: tracked.append(list(pids)))
    try:
        metrics.discover()
        assert tracked and 1 not in tracked[-1] and roots_job.pid in tracked[-1]
        metrics.update()
        assert "1" not in {figures.labels[0] for figures in metrics.figures}
    finally:
        metrics.stop()
        fake.stop()


def test_a_socket_named_for_a_pid_that_does_not_serve_it_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any user: a server of ours naming our other process, or greeting with another pid, speaks for neither."""
    base = tempfile.mkdtemp(prefix="gpumon-peers-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    other = subprocess.Popen(["sleep", "300"])
    hooks: list[StandInHook] = []
    try:
        hooks.append(StandInHook(directory, name_pid=other.pid, hello={"pid": other.pid}))
        hooks.append(StandInHook(directory, hello={"pid": other.pid}))
        found = scan(pids=[other.pid, hooks[1].pid])
        assert found.jobs == ()
        assert sorted(pid for pid, _why in found.refused) == sorted([other.pid, hooks[1].pid])
        with pytest.raises(UntrustedHook, match=f"served by pid {hooks[0].pid}, not by pid {other.pid}"):
            HookConnection(hooks[0].path)
        with pytest.raises(UntrustedHook, match=f"claims pid {other.pid}, but pid {hooks[1].pid} serves it"):
            HookConnection(hooks[1].path)
    finally:
        for hook in hooks:
            hook.stop()
        other.kill()
        other.wait()
        shutil.rmtree(base, ignore_errors=True)


def test_a_socket_made_before_the_process_it_names_started_is_not_its() -> None:
    """The pid was reused: a socket an hour older than the process of its pid speaks for someone gone."""
    process = subprocess.Popen(["sleep", "300"])
    try:
        with pytest.raises(UntrustedHook, match="the pid now belongs to another process"):
            check_process(process.pid, SocketClaim(os.getuid(), process.pid, time.time() - 3600), "/x/old.sock")
        check_process(process.pid, SocketClaim(os.getuid(), process.pid, time.time()), "/x/new.sock")
    finally:
        process.kill()
        process.wait()
