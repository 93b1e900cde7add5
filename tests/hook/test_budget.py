"""The step time budget: sampled steps only, parts that add up to the step, the collate split, timing wrappers
that leave torch as they found it, and sync sites named at the job's own line."""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pytest
import torch
from hook_helpers import collect_records

from gpumon import protocol, units
from gpumon.hook import budget as budget_module
from gpumon.hook import env as hook_env
from gpumon.hook.budget import BUDGET_EVERY, BUDGET_SLOW_STEP_S, _classify
from gpumon.hook.runtime import R_BUDGET, R_SEQ, HookRuntime
from gpumon.hook.sync_counter import SYNC_WARNING_TEXT, SyncCounter
from gpumon.hook.user_frame import first_user_frame, is_library_file
from gpumon.jobs.budget import PARTS as BUDGET_PART_NAMES
from gpumon.jobs.connection import HookConnection
from gpumon.jobs.jobstate import replay_messages
from gpumon.tui.job_pane import budget_line

PARTS = ("data_worker_ms", "data_collate_ms", "h2d_ms", "sync_wait_ms", "rest_ms")


def test_a_real_job_budgets_one_step_in_n_and_its_parts_add_up(start_job: Any) -> None:
    steps = 2 * BUDGET_EVERY + 2
    # 21 ms a step: 16 steps take longer than the default's gap between budgeted steps (BUDGET_MIN_GAP_S).
    job = start_job("--mode", "optimizer", "--steps", str(steps), "--item-sleep-ms", "2", "--collate-sleep-ms", "5")
    with HookConnection(job.wait_socket()) as conn:
        job.event("done")
        records = collect_records(conn, steps)
    budgeted = sorted(seq for seq, record in records.items() if "budget" in record)
    # A step of BUDGET_SLOW_STEP_S or more (a loaded machine) budgets the next one too.
    after_slow = {seq + 1 for seq, record in records.items() if record["wall_ms"] >= 1000 * BUDGET_SLOW_STEP_S}
    assert {BUDGET_EVERY, 2 * BUDGET_EVERY} <= set(budgeted)
    assert set(budgeted) - {BUDGET_EVERY, 2 * BUDGET_EVERY} <= after_slow
    for seq in budgeted:
        record = records[seq]
        budget = record["budget"]
        assert sum(budget[part] for part in PARTS) == pytest.approx(record["wall_ms"], abs=0.01)
        assert budget["data_worker_ms"] + budget["data_collate_ms"] == pytest.approx(record["data_ms"], abs=0.01)
        assert 5.0 <= budget["data_collate_ms"] < record["data_ms"]  # the collate_fn's own sleep, not the items'
        assert budget["data_worker_ms"] >= 8 * 2.0  # eight items of 2 ms in Dataset.__getitem__
        assert (budget["h2d_bytes"], budget["h2d_copies"], budget["syncs"]) == (0, 0, 0)  # a CPU job
        assert budget["gpu_ms"] is None
    assert job.release() == 0, job.stderr()
    # The monitor's side: the budget carried into the view, its shares, the job pane's bar.
    steps_message = {"type": "steps", "records": [records[seq] for seq in sorted(records)]}
    view = replay_messages([steps_message], pid=job.pid).view()
    shares = view.budget
    assert shares.steps == len(budgeted) and shares.gpu is None and shares.pageable is None
    assert sum(getattr(shares, part) for part in BUDGET_PART_NAMES) == pytest.approx(1.0)
    assert shares.data_collate > 0.1 and shares.data == pytest.approx(
        sum(records[s]["data_ms"] for s in budgeted) / sum(records[s]["wall_ms"] for s in budgeted), abs=1e-3
    )
    line = budget_line(view, 120)
    assert (
        line is not None
        and line.plain.startswith("Budget")
        and f"collate {units.share(shares.data_collate)}" in line.plain
    )
    assert budget_line(replace(view, steps=tuple(s for s in view.steps if s.budget is None)), 120) is None


def test_the_env_var_sets_how_often_a_real_job_is_budgeted(start_job: Any) -> None:
    env = dict(os.environ, **{protocol.BUDGET_EVERY_ENV: "4"})
    job = start_job("--mode", "optimizer", "--steps", "10", "--item-sleep-ms", "0", env=env)
    with HookConnection(job.wait_socket()) as conn:
        job.event("done")
        records = collect_records(conn, 10)
    assert sorted(seq for seq, record in records.items() if "budget" in record) == [4, 8]
    assert job.release() == 0, job.stderr()


@pytest.mark.parametrize(
    ("value", "every", "said"),
    [
        ("", BUDGET_EVERY, None),
        ("1", 1, None),
        (" 64 ", 64, None),
        ("0", 0, None),
        ("-3", BUDGET_EVERY, "'-3'"),
        ("often", BUDGET_EVERY, "'often'"),
        ("\u00b2", BUDGET_EVERY, "'\u00b2'"),  # a digit to str.isdigit, not to int()
        ("99999999", BUDGET_EVERY, "'99999999'"),
    ],
)
def test_the_env_var_is_checked_and_a_bad_value_keeps_the_default(
    value: str, every: int, said: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(protocol.BUDGET_EVERY_ENV, value)
    hook_env._said.clear()
    runtimes = [HookRuntime(torch, clock=Clock()) for _ in range(2)]
    assert [rt.budget_every for rt in runtimes] == [every, every]
    lines = capsys.readouterr().err.splitlines()
    if said is None:
        assert lines == []
    else:
        assert lines == [
            f"gpumon hook: {protocol.BUDGET_EVERY_ENV}={said} is not a whole number from 0 to 1000000; "
            f"using {BUDGET_EVERY}"
        ]


def test_zero_budgets_no_step() -> None:
    rt = HookRuntime(torch, clock=Clock())
    rt.budget_every = 0
    for _ in range(2 * BUDGET_EVERY):
        rt.on_manual_step(None)
        assert not rt.budget.active
    assert all(record[R_BUDGET] is None for record in rt.records)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_timing_wrappers_go_on_at_the_first_budgeted_step_and_stay_until_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt = HookRuntime(torch, clock=Clock())
    rt.budget_min_gap_s = 0.0
    before = {name: torch.Tensor.__dict__.get(name) for name in ("to", "item", "cpu", "copy_")}
    original_sync = torch.cuda.synchronize
    classified: list[str] = []
    classify = budget_module._classify

    def counted_classify(name: str, *rest: Any) -> tuple[str | None, bool]:
        classified.append(name)
        return classify(name, *rest)

    monkeypatch.setattr(budget_module, "_classify", counted_classify)
    try:
        for _ in range(BUDGET_EVERY - 2):
            rt.on_manual_step(None)
            assert not rt.budget.active and "item" not in torch.Tensor.__dict__
        rt.on_manual_step(None)  # closes step BUDGET_EVERY - 1, opens step BUDGET_EVERY
        assert rt.budget.active and "item" in torch.Tensor.__dict__ and torch.cuda.synchronize is not original_sync
        wrappers = {name: torch.Tensor.__dict__[name] for name in before}
        # The job's calls behave as before, errors included.
        assert torch.tensor([2.5]).item() == 2.5
        assert torch.ones(2).to(torch.float64).dtype == torch.float64
        with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
            torch.zeros(2).item()
        assert classified == ["item", "to", "item"]
        rt.on_manual_step(None)
        assert rt.records[-1][R_BUDGET] is not None and rt.records[-2][R_BUDGET] is None
        assert rt.records[-1][R_BUDGET]["syncs"] == 0  # CPU tensors: nothing waited on a GPU
        # Off a budgeted step the wrappers stay, and only pass the call on.
        assert not rt.budget.active and torch.tensor([1.5]).item() == 1.5 and len(classified) == 3
        for _ in range(5 * BUDGET_EVERY):
            rt.on_manual_step(None)
            assert {name: torch.Tensor.__dict__[name] for name in before} == wrappers
        assert sum(record[R_BUDGET] is not None for record in rt.records) == 6
        # torch.Tensor was edited once for each of its nine wrapped methods (`if loss < best` and float(loss) wait
        # on the GPU too), not at every budgeted step.
        assert rt.budget.class_edits == 9
    finally:
        rt.budget.stop()
    assert {name: torch.Tensor.__dict__.get(name) for name in before} == before
    assert torch.cuda.synchronize is original_sync
    assert rt.budget.class_edits == 18


def test_a_wrapper_someone_else_replaced_is_left_to_them() -> None:
    rt = HookRuntime(torch, clock=Clock())
    rt.budget.begin(True)
    theirs = torch.Tensor.__dict__["tolist"]

    def their_tolist(self: torch.Tensor) -> Any:
        return theirs(self)

    torch.Tensor.tolist = their_tolist  # type: ignore[method-assign] - another library patching the same method
    try:
        rt.budget.begin(False)
        rt.budget.stop()
        assert torch.Tensor.__dict__["tolist"] is their_tolist
    finally:
        del torch.Tensor.tolist
        rt.budget.stop()
    assert "tolist" not in torch.Tensor.__dict__


def test_a_method_another_library_replaced_is_wrapped_again_a_few_times_at_most() -> None:
    """When another library replaced a wrapped method, the next budgeted step wraps theirs (timed once: the inner
    wrapper passes nested calls on); stop() hands theirs back. One that replaces it at every step is wrapped again
    only MAX_REWRAPS times: each time is an edit of the torch.Tensor class."""
    rt = HookRuntime(torch, clock=Clock())
    calls: list[str] = []
    rt.budget.begin(True)
    first = torch.Tensor.__dict__["item"]
    rt.budget.begin(False)
    rt.budget.begin(True)
    try:
        assert torch.Tensor.__dict__["item"] is first
        rt.budget.begin(False)
        for _ in range(budget_module.MAX_REWRAPS + 3):
            theirs = torch.Tensor.item

            def their_item(self: torch.Tensor, theirs: Any = theirs) -> Any:
                calls.append("theirs")
                return theirs(self)

            torch.Tensor.item = their_item  # type: ignore[method-assign] - another library patching the same method
            rt.budget.begin(True)
            rt.budget.begin(False)
        assert torch.tensor([1.5]).item() == 1.5
        assert calls == ["theirs"] * (budget_module.MAX_REWRAPS + 3)
        assert torch.Tensor.__dict__["item"] is their_item  # the last few were left unwrapped
        assert rt.budget.class_edits == 9 + budget_module.MAX_REWRAPS
    finally:
        rt.budget.stop()
        if torch.Tensor.__dict__.get("item") is not None:
            del torch.Tensor.item
    assert "item" not in torch.Tensor.__dict__


class CudaLike:
    """Stands in for a CUDA tensor (no GPU here): what _classify reads of one."""

    is_cuda = True


@pytest.mark.parametrize(
    ("name", "tensor", "args", "kwargs", "expected"),
    [
        ("to", torch.zeros(1), ("cuda",), {}, ("h2d", True)),
        ("to", torch.zeros(1), (torch.device("cuda", 0),), {"non_blocking": True}, ("h2d", False)),
        ("to", torch.zeros(1), (), {"device": "cuda:1", "dtype": torch.float16}, ("h2d", True)),
        ("to", torch.zeros(1), (0,), {}, ("h2d", True)),
        ("to", torch.zeros(1), (torch.float16,), {}, (None, True)),
        ("to", torch.zeros(1), ("cpu",), {}, (None, True)),
        ("to", CudaLike(), ("cpu",), {}, ("d2h", True)),
        ("to", CudaLike(), ("cpu",), {"non_blocking": True}, ("d2h", False)),
        ("to", CudaLike(), (), {"device": "cpu"}, ("d2h", True)),
        ("to", CudaLike(), (torch.device("cpu"),), {}, ("d2h", True)),
        ("to", CudaLike(), (torch.zeros(1),), {}, ("d2h", True)),
        ("to", CudaLike(), (torch.float16,), {}, (None, True)),
        ("cuda", torch.zeros(1), (), {}, ("h2d", True)),
        ("cuda", torch.zeros(1), (0, True), {}, ("h2d", False)),
        ("cuda", CudaLike(), (), {}, (None, True)),
        ("copy_", CudaLike(), (torch.zeros(1),), {}, ("h2d", True)),
        ("copy_", torch.zeros(1), (CudaLike(),), {}, ("d2h", True)),
        ("copy_", torch.zeros(1), (CudaLike(), True), {}, ("d2h", False)),
        ("copy_", torch.zeros(1), (torch.zeros(1),), {}, (None, True)),
        ("item", CudaLike(), (), {}, ("sync", True)),
        ("item", torch.zeros(1), (), {}, (None, True)),
        ("tolist", CudaLike(), (), {}, ("sync", True)),
        ("cpu", CudaLike(), (), {}, ("d2h", True)),
        ("cpu", torch.zeros(1), (), {}, (None, True)),
    ],
)
def test_calls_are_told_apart_by_direction(
    name: str, tensor: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: tuple[str | None, bool]
) -> None:
    assert _classify(name, tensor, args, kwargs) == expected


def test_library_files_and_the_jobs_own() -> None:
    assert is_library_file(torch.__file__)
    assert is_library_file(warnings.__file__)
    assert is_library_file(budget_module.__file__)
    assert is_library_file("<frozen importlib._bootstrap>")
    assert not is_library_file(__file__)
    assert first_user_frame(sys._getframe()) == (__file__, sys._getframe().f_lineno)


def test_sync_sites_name_the_jobs_line_not_torch() -> None:
    """torch warns from its own file (torch/storage.py:264 in the issue); the site is the line that called it."""
    modes = [0]
    counter = SyncCounter(lambda: modes[0], modes.append)
    assert counter.start() is None
    torch_file = torch.storage.__file__
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            line = sys._getframe().f_lineno + 1
            warnings.warn_explicit(f"x {SYNC_WARNING_TEXT} y", UserWarning, torch_file, 264)
    finally:
        counter.stop()
    assert counter.count == 1
    assert counter.top_sites() == [{"file": __file__, "line": line, "count": 1}]


def test_default_budgeted_steps_are_at_least_the_gap_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast loop is budgeted one step in 16 but at most ten times a second; an explicit N has no gap."""

    def budgeted_steps(steps: int) -> list[int]:
        now = [100.0]
        runtime = HookRuntime(torch, clock=lambda: now[0])
        try:
            for _ in range(steps):  # 1 ms steps: 16 steps take 16 ms
                now[0] += 0.001
                runtime.on_manual_step(None)
        finally:
            runtime.budget.stop()
        return [record[R_SEQ] for record in runtime.records if record[R_BUDGET] is not None]

    monkeypatch.delenv(protocol.BUDGET_EVERY_ENV, raising=False)
    due = budgeted_steps(200)
    assert due[0] == BUDGET_EVERY and all(b - a >= 100 for a, b in pairwise(due)), due
    assert all(step % BUDGET_EVERY == 0 for step in due)
    monkeypatch.setenv(protocol.BUDGET_EVERY_ENV, "16")
    assert budgeted_steps(64) == [16, 32, 48, 64]


def test_slow_steps_are_budgeted_the_gap_apart_whatever_their_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """One step in 16 of a job at 1.5 steps/s is one every 10 s: a diagnosis of a few seconds would see no budget.
    After a step of BUDGET_SLOW_STEP_S or more the next is budgeted too, still BUDGET_MIN_GAP_S apart."""

    def budgeted_steps(steps: int, seconds: float) -> list[int]:
        now = [100.0]
        runtime = HookRuntime(torch, clock=lambda: now[0])
        try:
            for _ in range(steps):
                now[0] += seconds
                runtime.on_manual_step(None)
        finally:
            runtime.budget.stop()
        return [record[R_SEQ] for record in runtime.records if record[R_BUDGET] is not None]

    monkeypatch.delenv(protocol.BUDGET_EVERY_ENV, raising=False)
    assert budgeted_steps(12, 0.7) == list(range(2, 13))  # step 1 opens before any step's time is known
    every_fifth = budgeted_steps(40, 0.06)  # 60 ms steps: the 0.25-s gap is five steps
    assert all(b - a == 5 for a, b in pairwise(every_fifth)) and len(every_fifth) >= 7, every_fifth
    assert budgeted_steps(64, 0.03) == [16, 32, 48, 64]  # below the slow step: one in 16 as before
    monkeypatch.setenv(protocol.BUDGET_EVERY_ENV, "16")
    assert budgeted_steps(32, 0.7) == [16, 32]  # an explicit one-in-N is exactly that


def test_a_timed_copy_tells_the_stack_sampler_what_the_job_s_line_is_doing(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dst.copy_(src)` across devices reads as the job's own CPU work from its source text; while the wrapper times
    it, BudgetMeter.inside says host->device copy (or sync, for a blocking device->host one), and nothing after."""
    rt = HookRuntime(torch, clock=Clock())
    seen: list[str | None] = []

    def original(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(rt.budget.inside)
        return tensor

    kinds = iter([("h2d", True), ("d2h", True), ("d2h", False), (None, True)])
    monkeypatch.setattr(budget_module, "_classify", lambda *_: next(kinds))
    try:
        rt.budget.begin(True)
        wrapper = rt.budget._wrap("copy_", original)
        for _ in range(4):
            wrapper(torch.zeros(2), torch.ones(2))
        assert seen == ["h2d", "sync", None, None] and rt.budget.inside is None
    finally:
        rt.budget.stop()


def test_a_copy_behind_queued_gpu_work_is_timed_as_a_sync_and_as_a_copy_s_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocking host->device copy that finds the stream busy waits as a sync does: its time is in sync_wait_ms and
    in h2d_wait_ms, its bytes (pageable here) among the copies', so that the step model gives its drain to the copy."""
    clock = Clock()
    rt = HookRuntime(torch, clock=clock)
    busy = iter([True, False])
    monkeypatch.setattr(budget_module, "_classify", lambda *_: ("h2d", True))
    monkeypatch.setattr(rt.budget, "_stream_busy", lambda: next(busy))

    def copy(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        clock.now += 0.002
        return tensor

    try:
        rt.budget.begin(True)
        wrapper = rt.budget._wrap("copy_", copy)
        payload = torch.zeros(256)
        wrapper(torch.zeros(256), payload)
        wrapper(torch.zeros(256), payload)
        record = rt.budget.record(wall_s=1.0, data_s=0.0)
    finally:
        rt.budget.stop()
    nbytes = payload.numel() * payload.element_size()
    assert record["syncs"] == 1 and record["h2d_copies"] == 2
    assert record["h2d_wait_bytes"] == nbytes and record["h2d_bytes"] == record["h2d_pageable_bytes"] == 2 * nbytes
    assert record["h2d_wait_ms"] == record["sync_wait_ms"] == record["h2d_ms"] == pytest.approx(2.0)
