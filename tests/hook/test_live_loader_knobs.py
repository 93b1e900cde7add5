"""DataLoader knobs set live take effect mid-epoch: real hooked jobs count every index of the epoch themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_helpers import REPO_ROOT, get_state

from gpumon import protocol
from gpumon.jobs.connection import HookConnection
from tests.job_process import JobOutput

JOBS = Path(__file__).parent / "jobs"
FEW_STEPS = 4
"""A change asked for while the job waits is in effect this many steps after it goes on, at most."""


class ScriptJob(JobOutput):
    """One run of a job script in tests/hook/jobs with a control directory (`--control`)."""

    def __init__(self, script: str, args: list[str], sock_dir: str) -> None:
        self.control = tempfile.mkdtemp(prefix="gpumon-live-")
        env = dict(os.environ)
        env[protocol.SOCKET_DIR_ENV] = sock_dir
        env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), str(REPO_ROOT)] if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, str(JOBS / script), "--control", self.control, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.pid = self.proc.pid
        self.socket_path = os.path.join(sock_dir, f"{self.pid}.sock")

    def go(self, step: int) -> None:
        Path(self.control, f"go{step}").touch()

    def result(self, timeout: float = 120.0) -> dict[str, Any]:
        """What the job saw, once it is done (it then waits for release())."""
        self.event("done", timeout)
        with open(os.path.join(self.control, "result.json")) as data:
            result: dict[str, Any] = json.load(data)
        return result

    def release(self, timeout: float = 30.0) -> None:
        Path(self.control, "release").touch()
        assert self.proc.wait(timeout) == 0, self.stderr()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def script_job(sock_dir: str) -> Iterator[Any]:
    jobs: list[ScriptJob] = []

    def start(script: str, *args: str) -> ScriptJob:
        job = ScriptJob(script, list(args), sock_dir)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.kill()


def _set(conn: HookConnection, knobs: dict[str, Any]) -> dict[str, Any]:
    ack = conn.request({"type": protocol.SET_KNOB, "id": 1, "knobs": knobs}, (protocol.KNOB_ACK,))
    assert ack["type"] == protocol.KNOB_ACK, ack
    return ack


def _first_step(notes: list[dict[str, int]], after: int, holds: Callable[[dict[str, int]], bool]) -> int:
    """The first step after `after` whose note `holds`."""
    for note in notes[after:]:
        if holds(note):
            return note["step"]
    raise AssertionError(f"not after step {after}: {notes[after : after + 12]}")


def test_num_workers_changes_mid_epoch_and_back_with_every_index_once(script_job: Any) -> None:
    job = script_job("live_loader_train.py", "--pause", "40", "--pause", "200")
    with HookConnection(job.wait_socket()) as conn:
        assert job.event("paused")["step"] == 40
        ack = _set(conn, {"num_workers": 3})
        assert ack["applies"] == {"num_workers": protocol.APPLIES_NEXT_BATCH} and "not_live" not in ack
        job.go(40)
        assert job.event("paused")["step"] == 200
        (loader,) = get_state(conn)["dataloaders"]
        assert loader["num_workers"] == 3 and len(loader["worker_pids"]) == 3
        _set(conn, {"num_workers": 2})  # the rollback, the same way
        job.go(200)
        result = job.result()
        state = get_state(conn)
    job.release()
    assert result["each_once"], (result["repeated"], result["missing"])
    assert result["seen"] == result["size"] == 4000
    assert result["in_sampler_order"]
    notes = result["notes"]
    assert all(note["num_workers"] == 2 for note in notes[:40])
    for paused_at, before, after in ((40, 2, 3), (200, 3, 2)):
        in_effect = _first_step(notes, paused_at, lambda note, n=after: note["num_workers"] == n)
        assert in_effect <= paused_at + FEW_STEPS, notes[paused_at : paused_at + 10]
        # The old workers yield the batches they had fetched (prefetch_factor 2 each), then exit.
        alone = _first_step(notes, paused_at, lambda note, n=after: note["processes"] == n)
        assert alone <= in_effect + 2 * before + 1, notes[paused_at : paused_at + 12]
    assert state["knobs"]["applied"] == {"num_workers": 2}
    assert state["knobs"]["errors"] == [] and state["hook"]["errors"] == 0, state["hook"]
    assert state["dataloaders"][0]["num_workers"] == 2


def _steps_until(notes: list[dict[str, Any]], after: int, holds: Callable[[dict[str, Any]], bool]) -> int:
    """Steps after `after` until a note `holds` (1: the first step after it)."""
    for note in notes[after:]:
        if holds(note):
            return int(note["step"]) - after
    raise AssertionError(f"not after step {after}: {notes[after : after + 8]}")


def test_gc_freeze_and_skip_empty_cache_live_and_rolled_back(script_job: Any) -> None:
    job = script_job("owner_knobs_train.py", "--steps", "60", "--pause", "20", "--pause", "40")
    with HookConnection(job.wait_socket()) as conn:
        assert job.event("paused")["step"] == 20
        ack = _set(conn, {"gc_freeze": True, "skip_empty_cache": True})
        assert ack["applies"] == {"gc_freeze": protocol.APPLIES_NEXT_STEP, "skip_empty_cache": "next_step"}
        job.go(20)
        assert job.event("paused")["step"] == 40
        assert get_state(conn)["knobs"]["applied"] == {"gc_freeze": True, "skip_empty_cache": True}
        _set(conn, {"gc_freeze": False, "skip_empty_cache": False})
        job.go(40)
        result = job.result()
        state = get_state(conn)
    job.release()
    notes = result["notes"]
    job_threshold = notes[0]["threshold"]
    assert [n["threshold"] for n in notes[:20]] == [job_threshold] * 20
    assert [n["reached"] for n in notes[:20]] == list(range(1, 21)) and notes[19]["skipped"] == 0
    assert notes[19]["frozen"] == 0
    # On within a step or two: thresholds raised, objects frozen, empty_cache calls skipped (counted by the wrapper).
    on = _steps_until(notes, 20, lambda n: n["threshold"] == [max(50_000, job_threshold[0]), 50, 100])
    assert on <= 2
    assert all(n["frozen"] > 0 for n in notes[20 + on - 1 : 40])
    reached_at_40 = notes[39]["reached"]
    assert notes[39]["skipped"] >= 40 - 20 - on and reached_at_40 <= 20 + on
    # Rolled back the same way: the job's thresholds, nothing frozen, every call reaches empty_cache again.
    off = _steps_until(notes, 40, lambda n: n["threshold"] == job_threshold and n["frozen"] == 0)
    assert off <= 2
    assert notes[-1]["reached"] - reached_at_40 >= 20 - off and notes[-1]["skipped"] == notes[39 + off]["skipped"]
    assert state["knobs"]["applied"] == {"gc_freeze": False, "skip_empty_cache": False}
    assert state["hook"]["errors"] == 0, state["hook"]


def test_an_iterable_dataset_says_not_live_and_changes_at_its_next_epoch(script_job: Any) -> None:
    job = script_job("live_loader_train.py", "--iterable", "--size", "800", "--pause", "20")
    with HookConnection(job.wait_socket()) as conn:
        assert job.event("paused")["step"] == 20
        ack = _set(conn, {"num_workers": 3})
        assert ack["not_live"]["num_workers"].startswith("not live: IndexStream is an IterableDataset")
        job.go(20)
        result = job.result()
        state = get_state(conn)
    job.release()
    assert result["each_once"], (result["repeated"], result["missing"])
    assert {note["num_workers"] for note in result["notes"]} == {2}, "the epoch ends with the workers it began with"
    assert state["knobs"]["applied"] == {"num_workers": 3} and state["hook"]["errors"] == 0
