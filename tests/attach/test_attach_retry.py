"""Attaching to a hook that answers late (a connection flood, a stalled job) tries again within a deadline instead of
failing at the first hello that does not come in 0.5 s."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from gpumon.jobs.discovery import AttachError
from gpumon.jobs.session import AttachedJob, open_job

STALL_S = 1.5
"""Longer than one try's wait for the hello (0.5 s), well within the retries' deadline."""


def test_attach_waits_out_a_hook_that_answers_late(start_job: Any) -> None:
    job = start_job("--seconds", "60")
    job.event("ready")
    outcome: dict[str, Any] = {}

    def attach() -> None:
        try:
            outcome["job"] = open_job(job.pid)
        except AttachError as error:
            outcome["error"] = str(error)

    os.killpg(job.pid, signal.SIGSTOP)
    attaching = threading.Thread(target=attach)
    try:
        attaching.start()
        time.sleep(STALL_S)  # the stall itself: the hook answers nothing while stopped
    finally:
        os.killpg(job.pid, signal.SIGCONT)
    attaching.join(30)
    assert not attaching.is_alive()
    assert "error" not in outcome, outcome.get("error")
    attached = outcome["job"]
    try:
        assert isinstance(attached, AttachedJob), "the hook, not py-spy's estimate"
        assert attached.primary is not None and attached.primary.pid == job.pid
    finally:
        attached.stop()


def test_a_hook_that_never_answers_fails_once_the_deadline_passes(start_job: Any) -> None:
    job = start_job("--seconds", "60")
    job.event("ready")
    os.killpg(job.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        try:
            AttachedJob.for_pid(job.pid, deadline_s=2.0)
        except AttachError as error:
            message = str(error)
        else:
            raise AssertionError("a stopped hook was attached to")
        took = time.monotonic() - started
    finally:
        os.killpg(job.pid, signal.SIGCONT)
    assert "no hello" in message and "tried for 2 s" in message, message
    assert 1.5 <= took < 10, took
