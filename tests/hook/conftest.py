"""Fixtures for the hook tests: a private socket directory and training jobs run in subprocesses."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hook_helpers import Job

from gpumon import protocol
from gpumon.hook.runtime import HookRuntime


@pytest.fixture
def runtime() -> HookRuntime:
    """A fresh hook runtime of this process, with no step yet."""
    import torch

    return HookRuntime(torch)


@pytest.fixture
def backlog_runtime(runtime: HookRuntime) -> HookRuntime:
    """A runtime with the longest backlog a client may ask for (protocol.BACKLOG_MAX steps) already recorded."""
    for _ in range(protocol.BACKLOG_MAX):
        runtime.on_manual_step(4)
    return runtime


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A socket directory path (not created: the hook creates it) under a short /tmp path."""
    base = tempfile.mkdtemp(prefix="gpumon-test-", dir="/tmp")
    directory = os.path.join(base, "s")
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def start_job(sock_dir: str) -> Iterator[Any]:
    jobs: list[Job] = []

    def start(*args: str, env: dict[str, str] | None = None, go: bool = False) -> Job:
        job = Job(list(args), sock_dir, env=env, go=go)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()
