"""root attaches to another user's hooked job (#13 item 5): `gpumon attach` and `gpumon jobs` read it through its
hook; a third user stays refused. Runs where the test is root and can create a user (useradd); skipped otherwise."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from gpumon import protocol
from tests.attach.attach_helpers import HOOKED_JOB, REPO_ROOT, job_env

USER = "gpumon-test-other"


def other_user() -> pwd.struct_passwd | None:
    """A second, unprivileged user: created when missing (root only); None when there cannot be one."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        return None
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0 and "already exists" not in made.stderr:
        return None
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        return None


MINIMAL_HOOK = """
import json, os, socket, sys, time
from gpumon import protocol
path = os.path.join(os.environ[protocol.SOCKET_DIR_ENV], f"{os.getpid()}.sock")
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(8)
print(json.dumps({"event": "ready", "pid": os.getpid(), "hooked": True}), flush=True)
hello = protocol.encode({"type": "hello", "protocol": protocol.PROTOCOL_VERSION, "pid": os.getpid(),
                         "argv": ["minimal-hook"], "uid": os.getuid()})
clients = []
while True:
    conn, _ = server.accept()
    conn.sendall(hello)
    clients.append(conn)
"""


def cannot_run_python_as(user: pwd.struct_passwd, python: str, code: str) -> str | None:
    """Why `user` cannot run `code` with `python` (e.g. one that lives under root's 0700 home), None if it can."""
    try:
        done = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            env=job_env("/nonexistent"),
            cwd="/",
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
        )
    except OSError as error:
        return f"{python}: {error.strerror or error}"
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]


@pytest.fixture(scope="module")
def users_job() -> Iterator[tuple[Any, str]]:
    """A hooked CPU job running as the other user, serving in its own 0700 socket directory."""
    user = other_user()
    if user is None:
        pytest.skip("needs root and useradd to run a job as a second user")
    command = [sys.executable, str(HOOKED_JOB), "--seconds", "120"]
    if cannot_run_python_as(user, sys.executable, "import torch, gpumon.hook") is not None:
        # This Python lives where the second user cannot run it (e.g. under root's 0700 home): a stdlib Python
        # serves a minimal hook (hello, then silence) as that user instead.
        system = shutil.which("python3", path="/usr/bin:/usr/local/bin")
        reason = "no system python3" if system is None else cannot_run_python_as(user, system, "import gpumon.protocol")
        if system is None or reason is not None:
            pytest.skip(f"the second user can run neither this Python nor a system python3: {reason}")
        command = [system, "-c", MINIMAL_HOOK]
    base = tempfile.mkdtemp(prefix="gpumon-root-attach-", dir="/tmp")
    os.chmod(base, 0o755)
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    os.chown(directory, user.pw_uid, user.pw_gid)
    env = job_env(directory, {"HOME": base})
    job = subprocess.Popen(
        command,
        env=env,
        cwd=base,
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert job.stdout is not None
        ready = json.loads(job.stdout.readline() or "{}")
        assert ready.get("event") == "ready", job.stderr.read() if job.stderr else ""
        assert os.stat(os.path.join(directory, f"{job.pid}.sock")).st_uid == user.pw_uid
        yield job, directory
    finally:
        os.killpg(job.pid, 9)
        job.wait()
        shutil.rmtree(base, ignore_errors=True)


def gpumon(*args: str, sock_dir: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=job_env(sock_dir),
        cwd=REPO_ROOT,
        **options,
    )


def test_root_attaches_to_another_users_hooked_job(users_job: tuple[Any, str]) -> None:
    job, directory = users_job
    done = gpumon("attach", str(job.pid), "--json", "--duration", "3", sock_dir=directory)
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert messages[0]["type"] == protocol.HELLO and messages[0]["pid"] == job.pid, "the hook, not py-spy"
    if messages[0].get("argv") != ["minimal-hook"]:
        assert any(message["type"] == protocol.STEPS for message in messages)
    assert "served by uid" not in done.stderr


def test_root_lists_another_users_jobs_and_leaves_their_sockets_alone(users_job: tuple[Any, str]) -> None:
    job, directory = users_job
    done = gpumon("jobs", "--json", sock_dir=directory)
    assert done.returncode == 0, done.stderr
    groups = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [g["jobs"][0]["pid"] for g in groups] == [job.pid]
    assert os.path.exists(os.path.join(directory, f"{job.pid}.sock"))


def test_a_third_user_stays_refused(users_job: tuple[Any, str]) -> None:
    job, directory = users_job
    nobody = pwd.getpwnam("nobody")
    python = next(
        (
            candidate
            for candidate in (sys.executable, shutil.which("python3", path="/usr/bin"))
            if candidate and cannot_run_python_as(nobody, candidate, "import gpumon.cli") is None
        ),
        None,
    )
    if python is None:
        pytest.skip("nobody can run no Python that imports gpumon.cli")
    done = subprocess.run(
        [python, "-m", "gpumon", "attach", str(job.pid), "--json", "--duration", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env=job_env(directory),
        cwd="/",
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
    )
    assert done.returncode == 2, done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and '"type": "hello"' not in done.stdout
    assert not done.stdout.strip()
