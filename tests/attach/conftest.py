"""Fixtures for the attach tests: a private socket directory and training jobs in subprocesses."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from attach_helpers import HOOKED_JOB, SPY_TARGET, Job

from gpumon import protocol


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A socket directory (created 0700 like the hook does) that only this test's jobs use."""
    base = tempfile.mkdtemp(prefix="gpumon-attach-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def start_job(sock_dir: str) -> Iterator[Any]:
    """start_job(*args, env=None, script=HOOKED_JOB) -> Job; every job is killed at the end."""
    jobs: list[Job] = []

    def start(*args: str, env: dict[str, str] | None = None, script: Path = HOOKED_JOB) -> Job:
        job = Job(script, list(args), sock_dir, env)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()


def _private_dir() -> str:
    base = tempfile.mkdtemp(prefix="gpumon-attach-shared-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    return directory


@pytest.fixture(scope="session")
def shared_hooked_job() -> Iterator[Job]:
    """One hooked job, training for the whole session in its own socket directory, for tests that only watch it
    (starting torch costs seconds on a small box). Use with `watch_shared`."""
    yield from _session_job(HOOKED_JOB, ["--seconds", "600"])


@pytest.fixture(scope="session")
def shared_spy_job() -> Iterator[Job]:
    """One job WITHOUT the hook that waits on its DataLoader all session (for the py-spy tests)."""
    yield from _session_job(SPY_TARGET, ["--mode", "data", "--seconds", "600"])


def _session_job(script: Path, args: list[str]) -> Iterator[Job]:
    """`script` running in a private socket directory until the session ends, once it said it is ready."""
    directory = _private_dir()
    job = Job(script, args, directory)
    try:
        job.event("ready")
        yield job
    finally:
        job.kill()
        shutil.rmtree(os.path.dirname(directory), ignore_errors=True)


@pytest.fixture
def watch_shared(shared_hooked_job: Job, monkeypatch: pytest.MonkeyPatch) -> Job:
    """The shared hooked job, with this process looking for sockets where it has its own."""
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, shared_hooked_job.sock_dir)
    return shared_hooked_job
