"""The sync-count diagnosis window on its own: opened, counted per step, answered once; refused when it cannot run."""

from __future__ import annotations

import types
import warnings
from collections import deque
from typing import Any

from gpumon import protocol
from gpumon.hook.diagnosis import SyncDiagnosis
from gpumon.hook.sync_counter import SYNC_WARNING_TEXT


def fake_torch(initialized: bool = True, mode: int = 0) -> Any:
    state = {"mode": mode}
    cuda = types.SimpleNamespace(
        is_initialized=lambda: initialized,
        get_sync_debug_mode=lambda: state["mode"],
        set_sync_debug_mode=lambda value: state.update(mode=value),
    )
    return types.SimpleNamespace(cuda=cuda, state=state)


def sync_warning() -> None:
    warnings.warn_explicit(f"x {SYNC_WARNING_TEXT} y", UserWarning, __file__, 1)


def test_a_window_counts_each_steps_syncs_and_answers_once() -> None:
    torch = fake_torch()
    outbox: deque[Any] = deque()
    diagnosis = SyncDiagnosis(torch, outbox)
    diagnosis.start(2, request_id="d1")
    assert diagnosis.counting and diagnosis.left == 2 and torch.state["mode"] == 1
    for syncs in (3, 1):
        for _ in range(syncs):
            sync_warning()
        counted = diagnosis.syncs_since_last()
        assert counted == syncs
        diagnosis.step(counted)
    assert not diagnosis.counting and diagnosis.left == 0 and torch.state["mode"] == 0
    (answer,) = outbox
    assert answer["type"] == protocol.DIAGNOSIS and answer["id"] == "d1" and answer["available"]
    assert answer["syncs_per_step"] == [3, 1] and answer["syncs_total"] == 4
    assert diagnosis.syncs_since_last() is None


def test_windows_that_cannot_run_say_why() -> None:
    outbox: deque[Any] = deque()
    SyncDiagnosis(fake_torch(initialized=False), outbox).start(5, request_id=1)
    SyncDiagnosis(fake_torch(mode=2), outbox).start(5, request_id=2)  # the job's own sync debug mode stays
    assert [(m["id"], m["available"]) for m in outbox] == [(1, False), (2, False)]
    assert "not initialized" in outbox[0]["reason"] and "itself" in outbox[1]["reason"]
    busy = SyncDiagnosis(fake_torch(), outbox)
    busy.start(5, request_id=3)
    busy.start(5, request_id=4)
    assert outbox[-1]["type"] == protocol.ERROR and outbox[-1]["code"] == protocol.E_BUSY
    busy.finish()
