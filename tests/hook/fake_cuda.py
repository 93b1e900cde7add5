"""A fake `torch` for the hook's CUDA paths on a machine without a GPU.

Events complete only when the test says the fake GPU got that far; reading an incomplete event's
elapsed time, or any synchronize, fails the test (the real ones would block the training thread).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class WouldSync(AssertionError):
    pass


class FakeEvent:
    def __init__(self, gpu: FakeCuda) -> None:
        self.gpu = gpu
        self.index: int | None = None
        self.time = 0.0
        self.records = 0

    def record(self, stream: Any = None) -> None:
        self.gpu.recorded += 1
        self.index = self.gpu.recorded
        self.time = self.gpu.gpu_time_ms
        self.records += 1
        self.gpu.events_recorded.append(self)

    def query(self) -> bool:
        return self.index is not None and self.index <= self.gpu.completed

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.query() and end.query()):
            raise WouldSync("elapsed_time on an event that is not complete")
        return end.time - self.time

    def synchronize(self) -> None:
        raise WouldSync("event.synchronize")


class FakeCuda:
    def __init__(self) -> None:
        self.initialized = True
        self.capturing = False
        self.recorded = 0
        self.completed = 0
        self.gpu_time_ms = 0.0
        self.sync_debug_mode = 0
        self.events_created = 0
        self.events_recorded: list[FakeEvent] = []

    # what the hook may call
    def is_initialized(self) -> bool:
        return self.initialized

    def current_device(self) -> int:
        return 0

    def is_current_stream_capturing(self) -> bool:
        return self.capturing

    def current_stream(self, device: int | None = None) -> str:
        return f"stream-{device}"

    def Event(self, enable_timing: bool = False) -> FakeEvent:
        assert enable_timing
        self.events_created += 1
        return FakeEvent(self)

    def get_sync_debug_mode(self) -> int:
        return self.sync_debug_mode

    def set_sync_debug_mode(self, mode: int | str) -> None:
        self.sync_debug_mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode)  # type: ignore[call-overload]

    # what it must never call
    def synchronize(self, device: Any = None) -> None:
        raise WouldSync("torch.cuda.synchronize")

    # test controls
    def complete_all(self) -> None:
        self.completed = self.recorded


def fake_torch() -> Any:
    """A namespace with just what HookRuntime touches."""
    matmul = SimpleNamespace(allow_tf32=False)
    cudnn = SimpleNamespace(benchmark=False, allow_tf32=True, deterministic=False)
    state = SimpleNamespace(precision="highest")

    def set_float32_matmul_precision(value: str) -> None:
        state.precision = value

    return SimpleNamespace(
        cuda=FakeCuda(),
        backends=SimpleNamespace(cuda=SimpleNamespace(matmul=matmul), cudnn=cudnn),
        set_float32_matmul_precision=set_float32_matmul_precision,
        get_float32_matmul_precision=lambda: state.precision,
    )
