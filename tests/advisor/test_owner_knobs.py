"""The owner knobs (gc_freeze, skip_empty_cache): proposed for their finding, tried live on a real hooked job, with
the owner they test in the result's reason, and rolled back."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from advisor_support import REPO
from test_runners import PLAIN, base_env

from gpumon import protocol
from gpumon.advisor.catalogue import code_change, experiments_for
from gpumon.advisor.categories import ALLOCATOR_CHURN, GC_BOUND
from gpumon.advisor.live import LiveRunner, current_value, in_effect
from gpumon.advisor.measure import SnapshotLog
from gpumon.advisor.results import OK
from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals
from gpumon.jobs.client import JobClient
from gpumon.sampling.sampler import Sampler


@pytest.fixture
def sock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    directory = str(tmp_path / "sockets")
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    return directory


@pytest.fixture
def snapshots() -> Iterator[SnapshotLog]:
    log = SnapshotLog()
    sampler = Sampler(interval=0.25, slow_interval=0.5)
    sampler.start(log)
    yield log
    sampler.stop()


@pytest.mark.parametrize(("category", "knob"), [(GC_BOUND, "gc_freeze"), (ALLOCATOR_CHURN, "skip_empty_cache")])
def test_each_owner_gets_its_knob_first(category: str, knob: str) -> None:
    signals = Signals.of(source="hook", device="cuda", gpu_util=40)
    (first, *_rest) = experiments_for(Finding(category, "", 0.8), signals)
    assert first.knobs == {knob: True} and first.reason == category
    assert first.live and first.hook_only and not first.flags
    assert first.label == f"{knob} off -> on"
    assert first.owner.startswith(f"tests the owner {category} (")
    assert code_change({knob: True}) and code_change({knob: False}) == []


def test_gc_freeze_tried_live_names_its_owner_and_is_rolled_back(sock_dir: str, snapshots: SnapshotLog) -> None:
    job = subprocess.Popen(
        PLAIN,
        env=protocol.injection_env(base_env()),
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = JobClient(job.pid, wait_for_socket=True)
    try:
        live = LiveRunner(
            client, log=snapshots, warmup_s=0.3, window_s=1.0, repeats=2, apply_timeout_s=30.0, sync_diagnosis=False
        )
        client.start()
        assert live.baseline().status == OK
        signals = Signals.of(source="hook", device="cuda", gpu_util=40)
        (experiment, *_rest) = experiments_for(Finding(GC_BOUND, "", 0.8), signals)
        assert live.supports(experiment) is None
        result = live.run(experiment, {})
        assert result.status == OK, result.reason
        assert "tests the owner gc_bound" in result.reason and result.applied == {"gc_freeze": "hook"}
        assert current_value(client.view(), "gc_freeze") is True
        live.discard(experiment)
        deadline = time.monotonic() + 30
        while not in_effect(client.view(), {"gc_freeze": False}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert current_value(client.view(), "gc_freeze") is False, "rolled back"
        assert live.unrestored() == ()
    finally:
        client.stop()
        job.kill()
        job.wait()
