"""The hook's timing of torch.distributed collectives on a fake GPU: the training stream's wait between two events,
on GPU-timed steps only, never for async calls or other threads, carried in the step record as comm_ms."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fake_cuda import FakeCuda
from test_runtime import OPT, Clock, fetch, gpu_runtime, optimizer_step

from gpumon.hook import comm_timer, info
from gpumon.hook.runtime import R_COMM, R_GPU, HookRuntime


@pytest.fixture
def clock() -> Clock:
    return Clock()


def fake_all_reduce(cuda: FakeCuda, nccl_ms: float) -> Any:
    def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False) -> Any:
        cuda.gpu_time_ms += nccl_ms  # the training stream waits for NCCL's
        return "work" if async_op else None

    return all_reduce


def one_step(rt: HookRuntime, cuda: FakeCuda, calls: Any) -> None:
    cuda.gpu_time_ms = 0.0
    fetch(rt, rt.clock, 0.001)  # type: ignore[arg-type]
    cuda.gpu_time_ms = 2.0
    calls()
    cuda.gpu_time_ms += 1.0
    optimizer_step(rt, OPT)


def test_sync_collectives_of_a_timed_step_are_its_comm_ms(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock)
    all_reduce = comm_timer.timed_collective("all_reduce", fake_all_reduce(cuda, 3.0), rt)

    def calls() -> None:
        assert all_reduce("grad") is None
        all_reduce("grad", None, None, False)
        assert all_reduce("grad", async_op=True) == "work"  # waited on later, in C++: not timed
        assert all_reduce("grad", None, None, True) == "work"

    one_step(rt, cuda, calls)
    one_step(rt, cuda, lambda: None)
    cuda.complete_all()
    one_step(rt, cuda, lambda: None)
    first, second = rt.records[0], rt.records[1]
    assert first[R_COMM] == 6.0 and first[R_GPU] == 15.0  # two timed calls of 3 ms; 12 ms of NCCL in the step
    assert second[R_COMM] is None  # no collective: no comm_ms
    assert info.record_dict(rt, first)["comm_ms"] == 6.0 and "comm_ms" not in info.record_dict(rt, second)
    assert rt.errors == 0


def test_untimed_steps_and_other_threads_record_no_event(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock, every=1000)
    all_reduce = comm_timer.timed_collective("all_reduce", fake_all_reduce(cuda, 3.0), rt)
    one_step(rt, cuda, lambda: None)  # the step after the probe's may be timed; this one is not
    recorded = cuda.recorded
    one_step(rt, cuda, lambda: all_reduce("grad"))
    assert cuda.recorded - recorded <= 2  # its own start and end events at most, none around the call
    rt.gpu_every = 1
    one_step(rt, cuda, lambda: None)
    recorded = cuda.recorded
    thread = threading.Thread(target=lambda: all_reduce("grad"))
    thread.start()
    thread.join()
    assert cuda.recorded == recorded  # a collective from another thread: the training stream's time is not its


def test_the_wrappers_go_on_torch_distributed_and_come_off() -> None:
    import torch
    import torch.distributed as dist

    from gpumon.hook.patches import install_patches

    original = dist.all_reduce
    patches = install_patches(torch, HookRuntime(torch))
    try:
        assert dist.all_reduce is not original and dist.all_reduce.__wrapped__ is original  # type: ignore[attr-defined]
    finally:
        patches.remove()
    assert dist.all_reduce is original
