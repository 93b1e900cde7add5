"""Test helpers for the TUI tests: a fake SnapshotSource driven synchronously, sample builders, widget text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpumon.sampling.history import History
from gpumon.sampling.snapshot import CpuSample, GpuSample, ProcessSample, Snapshot
from gpumon.sampling.source import INTERVAL_STEPS, SnapshotCallback, next_step

GIB = 1024**3


class FakeSource:
    """A SnapshotSource that records every call and delivers snapshots only when a test pushes them."""

    def __init__(self, *, live: bool = False, description: str = "fake source", interval: float = 1.0) -> None:
        self.history = History()
        self.live = live
        self.description = description
        self.calls: list[str] = []
        self._interval = interval
        self._paused = False
        self._on_snapshot: SnapshotCallback | None = None

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def paused(self) -> bool:
        return self._paused

    def start(self, on_snapshot: SnapshotCallback) -> None:
        self.calls.append("start")
        self._on_snapshot = on_snapshot

    def stop(self) -> None:
        self.calls.append("stop")

    def pause(self) -> None:
        self.calls.append("pause")
        self._paused = True

    def resume(self) -> None:
        self.calls.append("resume")
        self._paused = False

    def faster(self) -> None:
        self.calls.append("faster")
        self._interval = next_step(INTERVAL_STEPS, self._interval, -1)

    def slower(self) -> None:
        self.calls.append("slower")
        self._interval = next_step(INTERVAL_STEPS, self._interval, 1)

    def push(self, *snapshots: Snapshot) -> None:
        """Feed the history and call the app's callback, as a source's thread would (here synchronously)."""
        assert self._on_snapshot is not None, "the app has not started the source"
        for snapshot in snapshots:
            self.history.add(snapshot)
            self._on_snapshot(snapshot)


def frozen_clock(snapshots: list[Snapshot]) -> Callable[[], float]:
    """A clock stuck just after the last snapshot, so nothing on screen depends on the wall clock."""
    moment = snapshots[-1].timestamp + 0.5
    return lambda: moment


def gpu(index: int = 0, *, gpm: bool = True, **changes: object) -> GpuSample:
    sample = GpuSample(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA H100 80GB HBM3" if gpm else "NVIDIA A100-SXM4-40GB",
        utilization_gpu=90.0,
        utilization_memory=40.0,
        memory_used=60 * GIB,
        memory_total=80 * GIB,
        temperature=60.0,
        power=400.0,
        power_limit=700.0,
        clock_sm=1980,
        clock_memory=2619,
        throttle_reasons=(),
        pcie_rx=2 * GIB,
        pcie_tx=0.1 * GIB,
        sm_activity=50.0 if gpm else None,
        sm_occupancy=30.0 if gpm else None,
        tensor_activity=30.0 if gpm else None,
        dram_bandwidth=45.0 if gpm else None,
    )
    return replace(sample, **changes)  # type: ignore[arg-type]


def process(pid: int, *, children: tuple[ProcessSample, ...] = (), **fields: object) -> ProcessSample:
    values: dict[str, object] = {
        "user": "alice",
        "command": f"python job{pid}.py",
        "cpu_percent": 50.0,
        "rss": GIB,
        "state": "running",
        "read_bytes_per_s": 0.0,
        "write_bytes_per_s": 0.0,
    }
    values.update(fields)
    return ProcessSample(pid=pid, children=children, **values)  # type: ignore[arg-type]


def snapshot(timestamp: float = 1_795_000_000.0, **changes: object) -> Snapshot:
    base = Snapshot(
        timestamp=timestamp,
        gpus=(gpu(0),),
        cpu=CpuSample(per_core=(10.0, 20.0, 30.0, 40.0), total=25.0, memory_used=8 * GIB, memory_total=64 * GIB),
        hostname="testhost",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def widget_text(widget: object) -> str:
    """What a widget draws (border title included), as plain text lines."""
    from textual.geometry import Region
    from textual.widget import Widget

    assert isinstance(widget, Widget)
    width, height = widget.outer_size
    strips = widget.render_lines(Region(0, 0, width, height))
    return "\n".join("".join(segment.text for segment in strip).rstrip() for strip in strips)
