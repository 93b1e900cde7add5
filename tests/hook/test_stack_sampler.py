"""The hook's stack sampler: a real thread's stack classified, the GPU's state read without waiting, CUDA graphs."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hook_helpers import get_state

from gpumon.hook.stack_sampler import BUSY, GPU_GRAPHS, GPU_NO_CUDA, IDLE, UNKNOWN, StackSampler
from gpumon.jobs.connection import HookConnection
from gpumon.protocol import activity


class FakeStream:
    def __init__(self) -> None:
        self.done = True
        self.queries = 0

    def query(self) -> bool:
        self.queries += 1
        return self.done


class FakeGraph:
    def capture_begin(self, *args: Any) -> str:
        return "captured"


def fake_torch(stream: FakeStream) -> Any:
    cuda = SimpleNamespace(
        is_initialized=lambda: True,
        default_stream=lambda device: stream,
        graphs=SimpleNamespace(CUDAGraph=FakeGraph),
    )
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="13.0"))


def fake_runtime(thread: int = 0, device: int | None = 0) -> Any:
    errors: list[BaseException] = []
    return SimpleNamespace(training_thread=thread, cuda_device=device, gpu=None, error=errors.append, errors=errors)


@pytest.fixture
def busy_thread() -> Iterator[Callable[[Callable[[threading.Event], None]], int]]:
    """Runs `work(stop)` on a thread until the test ends; returns its ident once the work has begun."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start(work: Callable[[threading.Event], None]) -> int:
        began = threading.Event()

        def run() -> None:
            began.set()
            work(stop)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert began.wait(5)
        threads.append(thread)
        assert thread.ident is not None
        return thread.ident

    yield start
    stop.set()
    for thread in threads:
        thread.join(5)


def preprocess_on_the_cpu(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for value in range(2000):  # the job's own CPU work
            total = (total + value * 3) % 1009


def test_the_job_s_own_cpu_work_is_counted_at_its_line(busy_thread: Any) -> None:
    stream = FakeStream()
    runtime = fake_runtime(busy_thread(preprocess_on_the_cpu))
    sampler = StackSampler(runtime, fake_torch(stream), hz=50)
    for _ in range(20):
        sampler.sample_once()
    result = sampler.result()
    assert result["samples"] == 20
    assert result["activities"] == {activity.CPU: [20, 0, 0]}  # the fake stream is idle: all 20 GPU-idle
    top = result["lines"][0]
    assert top["function"] == "preprocess_on_the_cpu" and top["file"] == __file__
    assert top["activity"] == activity.CPU and top["counts"] == [20, 0, 0]
    assert stream.queries == 20 and not runtime.errors


def test_the_budget_s_mark_names_what_the_job_s_line_does(busy_thread: Any) -> None:
    """While the budget's wrapper times a copy the line's text does not show (`dst.copy_(src)`), its mark counts the
    job's line as that copy; a stack in torch keeps its own activity."""
    runtime = fake_runtime(busy_thread(preprocess_on_the_cpu))
    runtime.budget = SimpleNamespace(inside=activity.H2D)
    sampler = StackSampler(runtime, fake_torch(FakeStream()), hz=50)
    for _ in range(10):
        sampler.sample_once()
    runtime.budget.inside = None
    for _ in range(5):
        sampler.sample_once()
    result = sampler.result()
    assert result["activities"] == {activity.H2D: [10, 0, 0], activity.CPU: [5, 0, 0]}
    by_activity = {line["activity"]: line for line in result["lines"]}
    assert by_activity[activity.H2D]["function"] == "preprocess_on_the_cpu"
    assert by_activity[activity.H2D]["counts"] == [10, 0, 0]


def parked(depth: int) -> Callable[[threading.Event], None]:
    """Work that waits for the test's end `depth` calls deep: one stack, the same at every sample."""

    def descend(stop: threading.Event, left: int) -> None:
        if left:
            descend(stop, left - 1)
        else:
            stop.wait()

    return lambda stop: descend(stop, depth)


def test_a_repeated_stack_is_classified_once_and_the_classifications_kept_stay_bounded(
    busy_thread: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    classified: list[int] = []
    original = activity.classify
    monkeypatch.setattr(activity, "classify", lambda frames, *rest: classified.append(1) or original(frames, *rest))
    runtime = fake_runtime(busy_thread(parked(3)))
    sampler = StackSampler(runtime, fake_torch(FakeStream()), hz=50)
    for _ in range(10):
        sampler.sample_once()
    assert len(classified) == 1, "the same stack ten times: classified once"
    top = sampler.result()["lines"][0]
    assert top["function"] == "parked.<locals>.descend" and top["counts"] == [10, 0, 0]

    monkeypatch.setattr("gpumon.hook.stack_sampler.MAX_STACKS", 2)
    for depth in (4, 5, 6, 7):
        runtime.training_thread = busy_thread(parked(depth))
        sampler.sample_once()
        assert len(sampler._stacks) <= 2
    assert len(classified) == 5 and sampler.result()["samples"] == 14 and not runtime.errors


def spin_without_line_numbers(stop: threading.Event) -> None:
    while not stop.is_set():
        pass


spin_without_line_numbers.__code__ = spin_without_line_numbers.__code__.replace(co_linetable=b"")


def test_a_frame_without_a_line_number_is_counted_not_an_error(busy_thread: Any) -> None:
    """Generated code (torch.compile's, exec'd code) can run instructions that have no line: their frame's f_lineno
    is None, counted as line 0."""
    runtime = fake_runtime(busy_thread(spin_without_line_numbers))
    sampler = StackSampler(runtime, fake_torch(FakeStream()), hz=50)
    for _ in range(50):
        sampler.sample_once()
    result = sampler.result()
    assert not runtime.errors, runtime.errors
    assert result["samples"] == 50
    lines = {(line["function"], line["line"]) for line in result["lines"]}
    assert ("spin_without_line_numbers", 0) in lines, lines


def test_busy_and_idle_follow_the_stream(busy_thread: Any) -> None:
    stream = FakeStream()
    sampler = StackSampler(fake_runtime(busy_thread(preprocess_on_the_cpu)), fake_torch(stream), hz=50)
    stream.done = False
    sampler.sample_once()
    sampler.sample_once()
    stream.done = True
    sampler.sample_once()
    assert sampler.result()["activities"][activity.CPU] == [1, 2, 0]
    assert sampler.result()["gpu_state"] is None


def test_a_cuda_graph_capture_stops_stream_queries_for_good(busy_thread: Any) -> None:
    stream = FakeStream()
    torch_module = fake_torch(stream)
    sampler = StackSampler(fake_runtime(busy_thread(preprocess_on_the_cpu)), torch_module, hz=50)
    sampler._guard_graphs()
    sampler.sample_once()
    assert FakeGraph().capture_begin() == "captured"  # the job's capture still happens
    sampler.sample_once()
    assert stream.queries == 1
    result = sampler.result()
    assert result["gpu_state"] == GPU_GRAPHS and result["activities"][activity.CPU] == [1, 0, 1]
    sampler.stop()
    assert FakeGraph.capture_begin.__name__ == "capture_begin" and "sampler" not in repr(FakeGraph.capture_begin)


def test_no_query_before_cuda_or_after_stop(busy_thread: Any) -> None:
    stream = FakeStream()
    runtime = fake_runtime(busy_thread(preprocess_on_the_cpu), device=None)
    sampler = StackSampler(runtime, fake_torch(stream), hz=50)
    sampler.sample_once()  # the job has not touched CUDA
    runtime.cuda_device = 0
    sampler.stop()
    sampler.sample_once()
    assert stream.queries == 0
    assert sampler.result()["activities"][activity.CPU] == [0, 0, 2]


def test_a_torch_without_cuda_reads_no_gpu_state(busy_thread: Any) -> None:
    sampler = StackSampler(fake_runtime(busy_thread(preprocess_on_the_cpu)), torch, hz=50)
    if torch.version.cuda:
        pytest.skip("this torch has CUDA")
    sampler.sample_once()
    assert sampler.result()["gpu_state"] == GPU_NO_CUDA
    assert sampler.result()["activities"][activity.CPU] == [0, 0, 1]


def test_a_dataloader_without_workers_is_data_loading(busy_thread: Any) -> None:
    inside = threading.Event()

    class SlowDataset(torch.utils.data.Dataset[int]):
        def __len__(self) -> int:
            return 1 << 20

        def __getitem__(self, index: int) -> int:
            inside.set()
            time.sleep(0.001)
            return index

    def load(stop: threading.Event) -> None:
        for _batch in torch.utils.data.DataLoader(SlowDataset(), batch_size=64):
            if stop.is_set():
                return

    sampler = StackSampler(fake_runtime(busy_thread(load)), fake_torch(FakeStream()), hz=50)
    assert inside.wait(10)
    for _ in range(10):
        sampler.sample_once()
    activities = sampler.result()["activities"]
    # Nearly every sample lands in __getitem__ or the fetch around it; a few may catch the collate.
    assert activities.get(activity.DATA_LOAD, [0])[0] >= 7, activities
    assert set(activities) <= {activity.DATA_LOAD, activity.DATA_COLLATE}
    assert any(line["function"].endswith("__getitem__") for line in sampler.result()["lines"])


def test_states_are_the_three_counters() -> None:
    assert (IDLE, BUSY, UNKNOWN) == (0, 1, 2)


def test_a_hooked_job_reports_its_samples_in_the_state(start_job: Any) -> None:
    job = start_job(
        "--mode",
        "optimizer",
        "--steps",
        "200",
        "--item-sleep-ms",
        "1",
        env={**os.environ, "GPUMON_HOOK_SAMPLE_HZ": "200"},
    )
    with HookConnection(job.wait_socket()) as conn:
        deadline = time.monotonic() + 30
        host: dict[str, Any] = {}
        while time.monotonic() < deadline:
            host = get_state(conn).get("host") or {}
            if host.get("activities", {}).get(activity.DATA_LOAD, [0, 0, 0])[2] >= 10:
                break
            time.sleep(0.05)
        assert host["hz"] == 200 and host["samples"] >= 10
        # A CPU build: the GPU's state is unknown, the DataLoader's __getitem__ (1 ms sleeps) is data loading.
        assert host["gpu_state"] == GPU_NO_CUDA
        assert host["activities"][activity.DATA_LOAD][2] >= 10
        assert host["cost_ms"] >= 0
        job.event("done")
    assert job.release() == 0, job.stderr()


def test_a_forked_child_gets_fresh_locks_and_never_queries() -> None:
    # A fork while the sampler thread held a lock copies it held; the child has no sampler thread to release it.
    stream = FakeStream()
    sampler = StackSampler(fake_runtime(threading.get_ident()), fake_torch(stream), hz=50)
    sampler._guard_graphs()
    sampler._query_lock.acquire()
    sampler._lock.acquire()
    sampler.forget_in_child()
    assert FakeGraph().capture_begin() == "captured"  # would deadlock on the copied lock
    sampler.sample_once()
    assert stream.queries == 0 and sampler.result()["samples"] == 1
    sampler._unguard_graphs()
    assert (
        "capture_begin" not in FakeGraph.__dict__ or FakeGraph.capture_begin.__qualname__ == "FakeGraph.capture_begin"
    )
