"""The host costs the step budget names beyond copies and syncs: the garbage collector, torch.cuda.empty_cache(),
device->host copies, optimizer.step() and where an optimizer's parameters live; in a real hooked job and piece by
piece where a CPU build has no CUDA."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hook_helpers import REPO_ROOT, collect_records, get_state

from gpumon import protocol
from gpumon.hook.allocator import MAX_SITES, OTHER_SITE, EmptyCacheCounter, device_alloc_counts
from gpumon.hook.budget import BudgetMeter
from gpumon.hook.gc_timer import GcTimer
from gpumon.hook.runtime import host_param_bytes, params_device
from gpumon.jobs.connection import HookConnection
from gpumon.jobs.jobstate import replay_messages
from gpumon.protocol import activity
from tests.job_process import JobOutput

HOST_COSTS_JOB = Path(__file__).parent / "jobs" / "host_costs_train.py"


class HostCostsJob(JobOutput):
    def __init__(self, sock_dir: str, *args: str) -> None:
        self.control = tempfile.mkdtemp(prefix="gpumon-job-")
        self.release_path = os.path.join(self.control, "release")
        env = dict(os.environ)
        env[protocol.SOCKET_DIR_ENV] = sock_dir
        env[protocol.BUDGET_EVERY_ENV] = "4"
        env["GPUMON_TEST_RELEASE"] = self.release_path
        env["PYTHONPATH"] = os.pathsep.join(p for p in [env.get("PYTHONPATH", ""), str(REPO_ROOT)] if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, str(HOST_COSTS_JOB), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.socket_path = os.path.join(sock_dir, f"{self.proc.pid}.sock")

    def release(self) -> int:
        Path(self.release_path).touch()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def test_a_real_job_sends_its_collector_empty_cache_and_optimizer_figures(sock_dir: str) -> None:
    steps = 64
    job = HostCostsJob(sock_dir, "--steps", str(steps))
    try:
        with HookConnection(job.wait_socket()) as conn:
            done = job.event("done")
            records = collect_records(conn, steps)
            state = get_state(conn)
    finally:
        assert job.release() == 0, job.stderr()
    budgeted = [records[seq] for seq in sorted(records) if "budget" in records[seq]]
    assert [record["seq"] for record in budgeted] == list(range(4, steps + 1, 4))
    budgets = [record["budget"] for record in budgeted]
    # The collector: 2000 tracked dicts a step fill the young generation many times over; the totals only grow.
    passes = [budget["gc_passes_total"] for budget in budgets]
    assert passes[-1] - passes[0] >= len(budgets), passes
    assert all(b >= a for a, b in itertools.pairwise(passes))
    assert budgets[-1]["gc_ms_total"] > budgets[0]["gc_ms_total"] > 0
    assert budgets[-1]["gc_collected_total"] >= 0 and budgets[-1]["gc_gen2_total"] <= passes[-1]
    # The state carries the same totals every second, budgeted steps or not (read after the last step).
    totals = state["gc"]
    assert totals["passes_total"] >= passes[-1] and totals["ms_total"] >= budgets[-1]["gc_ms_total"]
    assert totals["gen2_total"] <= totals["passes_total"] and totals["idle_ms_total"] <= totals["ms_total"]
    # empty_cache() once a step, after the optimizer: by the end of step N it was called N - 1 times.
    for record in budgeted:
        budget = record["budget"]
        assert budget["empty_cache_calls_total"] == record["seq"] - 1
        assert budget["empty_cache_calls"] == 1  # within the step: the previous iteration's call
        assert "device_allocs_total" not in budget  # no CUDA on this build
        assert budget["optimizer_ms"] > 0 and budget["d2h_copies"] == 0
        parts = ("data_worker_ms", "data_collate_ms", "h2d_ms", "d2h_ms", "sync_wait_ms", "rest_ms")
        assert sum(budget[part] for part in parts) == pytest.approx(record["wall_ms"], abs=0.01)
    assert state["empty_cache_sites"] == [
        {"file": str(HOST_COSTS_JOB), "line": done["empty_cache_line"], "count": steps}
    ]
    assert state["optimizers"] == [
        {"class": "AdamW", "params_device": "cpu", "host_bytes": (16 * 32 + 32 + 32 * 2 + 2) * 4}
    ]
    # The monitor's side.
    view = replay_messages(
        [state, {"type": protocol.STEPS, "records": [records[seq] for seq in sorted(records)]}]
    ).view()
    shares = view.budget
    assert shares.gc_share is not None and 0 < shares.gc_share < 1
    assert shares.gc_passes_per_s is not None and shares.gc_passes_per_s > 0
    assert shares.empty_cache_per_step == pytest.approx(1.0)
    assert 0 < shares.optimizer_share < 1
    assert shares.device_allocs_per_step is None
    assert view.empty_cache_sites == (f"{HOST_COSTS_JOB}:{done['empty_cache_line']} ({steps})",)
    assert view.optimizer_on_cpu is False  # parameters on the CPU, but so is the whole job


def test_the_collector_timer_counts_passes_and_comes_off() -> None:
    timer = GcTimer()
    timer.start()
    try:
        for _ in range(3):
            gc.collect(0)
        gc.collect()
        assert timer.passes >= 4 and timer.gen2_passes >= 1 and timer.seconds > 0
        garbage: list[Any] = []
        garbage.append(garbage)
        del garbage
        before = timer.collected
        gc.collect()
        assert timer.collected >= before + 1
    finally:
        timer.stop()
    assert not timer.running and all(getattr(c, "__self__", None) is not timer for c in gc.callbacks)
    passes = timer.passes
    gc.collect()
    assert timer.passes == passes


def test_empty_cache_calls_are_counted_at_the_callers_line_and_bounded() -> None:
    counter = EmptyCacheCounter()
    calls: list[int] = []
    empty_cache = counter.wrap(lambda: calls.append(1))
    line = sys._getframe().f_lineno + 2
    for _ in range(3):
        empty_cache()
    assert calls == [1, 1, 1] and counter.calls == 3 and counter.seconds >= 0
    assert counter.top_sites() == [{"file": __file__, "line": line, "count": 3}]
    for index in range(MAX_SITES + 5):  # distinct lines beyond the bound share one entry
        counter._count(
            0.0, SimpleNamespace(f_code=SimpleNamespace(co_filename=f"/job/x{index}.py"), f_lineno=1, f_back=None)
        )
    assert len(counter.sites) == MAX_SITES + 1 and counter.sites[OTHER_SITE] == 6  # 64 lines and the rest


def test_allocator_counts_are_read_only_with_a_device_and_never_initialize_cuda() -> None:
    assert device_alloc_counts(torch, None) is None
    assert not torch.cuda.is_initialized()
    stats = {"num_device_alloc": 7, "num_device_free": 3}
    fake = SimpleNamespace(cuda=SimpleNamespace(memory_stats_as_nested_dict=lambda device: stats))
    assert device_alloc_counts(fake, 0) == (7, 3)
    assert device_alloc_counts(SimpleNamespace(cuda=SimpleNamespace()), 0) is None


class CudaLike:
    """Stands in for a CUDA tensor of 1000 float32 (no GPU here)."""

    is_cuda = True

    def numel(self) -> int:
        return 1000

    def element_size(self) -> int:
        return 4


def test_a_device_to_host_copy_counts_as_a_copy_and_a_sync_but_its_time_once() -> None:
    meter = BudgetMeter(torch, lambda: 0.0, lambda: False, lambda exc: None)
    meter._count("d2h", True, False, CudaLike(), 0.004)
    meter._count("d2h", False, False, CudaLike(), 0.001)  # non_blocking: a copy, no wait
    meter._count("sync", True, False, None, 0.002)
    budget = meter.record(0.010, 0.0)
    assert (budget["d2h_ms"], budget["d2h_bytes"], budget["d2h_copies"]) == (5.0, 8000, 2)
    assert (budget["sync_wait_ms"], budget["syncs"]) == (2.0, 2)
    assert budget["rest_ms"] == pytest.approx(3.0)


def test_the_optimizer_step_is_timed_on_budgeted_steps_only() -> None:
    now = [0.0]
    meter = BudgetMeter(torch, lambda: now[0], lambda: False, lambda exc: None)
    optimizer = SimpleNamespace()
    try:
        meter.begin(True)
        meter._optimizer_step_begins(optimizer, (), {})
        now[0] += 0.003
        meter.optimizer_done(optimizer)
        assert meter.record(0.010, 0.0)["optimizer_ms"] == pytest.approx(3.0)
        meter.begin(False)
        meter._optimizer_step_begins(optimizer, (), {})
        assert meter.optimizer_id == 0
    finally:
        meter.stop()


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        (["cpu", "cpu"], "cpu"),
        (["cuda", "cuda"], "cuda"),
        (["cuda", "cpu"], "mixed"),
        ([], "none"),
    ],
)
def test_where_an_optimizers_parameters_live(devices: list[str], expected: str) -> None:
    params = [SimpleNamespace(device=SimpleNamespace(type=device)) for device in devices]
    optimizer = SimpleNamespace(param_groups=[{"params": params[:1]}, {"params": params[1:]}])
    assert params_device(optimizer) == expected


def test_a_real_optimizer_on_cpu_parameters() -> None:
    model = torch.nn.Linear(4, 2)
    assert params_device(torch.optim.AdamW(model.parameters())) == "cpu"
    assert host_param_bytes(torch.optim.AdamW(model.parameters())) == (4 * 2 + 2) * 4  # float32 weight and bias
    half = torch.nn.Linear(8, 8, bias=False).to(torch.bfloat16)
    assert host_param_bytes(torch.optim.SGD(list(model.parameters()) + list(half.parameters()))) == 40 + 64 * 2


def test_only_the_parameters_on_the_cpu_count_as_the_host_s_bytes() -> None:
    class Param:
        def __init__(self, device: str, count: int) -> None:
            self.device = SimpleNamespace(type=device)
            self.count = count

        def numel(self) -> int:
            return self.count

        def element_size(self) -> int:
            return 4

    optimizer = SimpleNamespace(param_groups=[{"params": [Param("cuda", 1000), Param("cpu", 10)]}, {"params": []}])
    assert host_param_bytes(optimizer) == 40 and params_device(optimizer) == "mixed"


def test_a_stack_inside_empty_cache_is_the_allocator_counted_at_the_jobs_line() -> None:
    frames = [
        activity.Frame("/venv/lib/python3.11/site-packages/torch/cuda/memory.py", "empty_cache", 220),
        activity.Frame(str(REPO_ROOT / "gpumon" / "hook" / "allocator.py"), "EmptyCacheCounter.wrap.<locals>.f", 40),
        activity.Frame("/job/train.py", "main", 12),
    ]
    assert activity.classify(frames, lambda file, line: "torch.cuda.empty_cache()") == (activity.ALLOC, None)
    assert activity.user_frame(frames) == frames[2]
    assert activity.ALLOC in activity.ACTIVITIES
