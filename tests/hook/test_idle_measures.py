"""The GPU idle the hook measures outright: collector passes begun with the training stream idle, empty_cache's
frees after the stream drained, blocking device->host copies after their drain; never a wait the call would not make."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpumon.hook.allocator import EmptyCacheCounter
from gpumon.hook.budget import BudgetMeter
from gpumon.hook.gc_timer import GcTimer


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def collect(timer: GcTimer, clock: Clock, generation: int, seconds: float) -> None:
    timer._on_gc("start", {"generation": generation})
    clock.now += seconds
    timer._on_gc("stop", {"generation": generation, "collected": 3, "uncollectable": 0})


def test_a_long_pass_begun_with_the_stream_idle_is_gpu_idle() -> None:
    clock, answers = Clock(), [True, False]
    asked: list[int] = []

    def stream_idle() -> bool | None:
        asked.append(1)
        return answers.pop(0)

    timer = GcTimer(clock, stream_idle)
    collect(timer, clock, 2, 0.030)
    collect(timer, clock, 1, 0.010)
    collect(timer, clock, 0, 0.001)
    assert timer.seconds == pytest.approx(0.041)
    assert timer.idle_seconds == pytest.approx(0.030)
    assert len(asked) == 2, "young (generation 0) passes are short and frequent: the stream is not asked for them"


def test_an_unknown_stream_state_counts_no_idle() -> None:
    clock = Clock()
    timer = GcTimer(clock, lambda: None)
    collect(timer, clock, 2, 0.050)
    assert timer.idle_seconds == 0.0 and timer.seconds == pytest.approx(0.05)


class FakeStream:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def synchronize(self) -> None:
        self.log.append("stream synchronize")


class FakeCuda:
    """torch.cuda as the allocator wrapper sees it: host-side counters, the current stream."""

    def __init__(self, reserved: int, allocated: int, capturing: bool = False) -> None:
        self.reserved, self.allocated, self.capturing = reserved, allocated, capturing
        self.log: list[str] = []

    def is_initialized(self) -> bool:
        return True

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    def memory_reserved(self) -> int:
        return self.reserved

    def memory_allocated(self) -> int:
        return self.allocated

    def current_stream(self) -> FakeStream:
        return FakeStream(self.log)


def empty_cache_of(cuda: FakeCuda, clock: Clock, frees_s: float) -> Callable[[], Any]:
    def original() -> None:
        cuda.log.append("empty_cache")
        clock.now += frees_s

    return original


def test_empty_cache_with_cached_blocks_drains_first_and_times_the_frees_as_idle() -> None:
    clock, cuda = Clock(), FakeCuda(reserved=8 << 30, allocated=2 << 30)
    counter = EmptyCacheCounter(clock)
    counter.wrap(empty_cache_of(cuda, clock, 0.004), cuda)()
    assert cuda.log == ["stream synchronize", "empty_cache"]
    assert counter.calls == 1 and counter.idle_seconds == pytest.approx(0.004)


@pytest.mark.parametrize(
    "cuda", [FakeCuda(reserved=2 << 30, allocated=2 << 30), FakeCuda(reserved=8 << 30, allocated=0, capturing=True)]
)
def test_empty_cache_that_would_not_wait_is_not_made_to(cuda: FakeCuda) -> None:
    """Nothing cached to free (empty_cache returns without a cudaFree, so without waiting), or a graph capture: no
    synchronize is added, and no idle is claimed."""
    clock = Clock()
    counter = EmptyCacheCounter(clock)
    counter.wrap(empty_cache_of(cuda, clock, 0.001), cuda)()
    assert cuda.log == ["empty_cache"]
    assert counter.calls == 1 and counter.idle_seconds == 0.0


class FakeTorch:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda


def test_a_blocking_device_to_host_copy_waits_for_the_stream_then_its_copy_is_idle() -> None:
    clock, cuda = Clock(), FakeCuda(reserved=0, allocated=0)
    meter = BudgetMeter(FakeTorch(cuda), clock, lambda: False, lambda exc: None)
    assert meter._drain() is True
    assert cuda.log == ["stream synchronize"]
    capturing = FakeCuda(reserved=0, allocated=0, capturing=True)
    assert BudgetMeter(FakeTorch(capturing), clock, lambda: False, lambda exc: None)._drain() is False
    assert capturing.log == []
