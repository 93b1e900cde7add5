"""XID errors as events of a GPU's history: marked once, in the sample that first carries them, from synthetic
snapshots and from the fake NVML through the real Sampler."""

from __future__ import annotations

from dataclasses import replace

from fake_nvml import FakeDevice, FakeNvml

from gpumon.sampling.history import THROTTLED, XID_ERROR, History
from gpumon.sampling.nvml import GpuCollector
from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import XID_EVENTS_KEPT, CpuSample, GpuSample, Snapshot, XidEvent
from tests.waiting import wait_until

WAIT = 5.0
"""Upper bound on waiting for the sampler and the XID thread; nothing asserts on timing."""


def sample(timestamp: float, xids: tuple[XidEvent, ...] | None, **changes: object) -> Snapshot:
    gpu = replace(GpuSample(index=0, uuid="GPU-0", name="NVIDIA H100 80GB HBM3", xid_events=xids), **changes)
    return Snapshot(timestamp=timestamp, gpus=(gpu,), cpu=CpuSample(per_core=(1.0,), total=1.0), hostname="host")


def xid_bits(history: History) -> list[int]:
    return [int(value or 0) & XID_ERROR for value in history.between("gpu0.events", 0, history.added)]


def test_an_xid_error_is_marked_in_the_first_sample_that_lists_it_and_only_there() -> None:
    history = History(seconds=10.0, fastest_interval=0.1)
    before = XidEvent(timestamp=50.0, xid=13)
    first, second = XidEvent(timestamp=102.5, xid=79), XidEvent(timestamp=104.5, xid=48)
    steps = [
        sample(100.0, (before,)),  # listed before this history began: not placed on it
        sample(101.0, (before,)),
        sample(102.0, (before,)),
        sample(103.0, (before, first)),
        sample(104.0, (before, first)),
        sample(105.0, (before, first, second), throttle_reasons=("hw_slowdown",)),
        sample(106.0, (before, first, second)),
    ]
    for step in steps:
        history.add(step)
    assert xid_bits(history) == [0, 0, 0, XID_ERROR, 0, XID_ERROR, 0]
    assert history.between("gpu0.events", 5, 6) == [float(XID_ERROR | THROTTLED)], "both events of one sample"


def test_a_new_xid_error_is_marked_when_the_kept_list_is_full_and_its_oldest_drops_out() -> None:
    history = History(seconds=10.0, fastest_interval=0.1)
    full = tuple(XidEvent(timestamp=float(code), xid=code) for code in range(XID_EVENTS_KEPT))
    history.add(sample(100.0, full))
    history.add(sample(101.0, full))
    history.add(sample(102.0, (*full[1:], XidEvent(timestamp=100.0, xid=94))))
    assert xid_bits(history) == [0, 0, XID_ERROR]


def test_unwatched_xid_errors_mark_nothing_and_errors_after_the_watch_starts_do() -> None:
    history = History(seconds=10.0, fastest_interval=0.1)
    history.add(sample(100.0, None))
    history.add(sample(101.0, None))
    history.add(sample(102.0, ()))
    history.add(sample(103.0, (XidEvent(timestamp=102.9, xid=31),)))
    assert xid_bits(history) == [0, 0, 0, XID_ERROR]


def test_xid_errors_from_the_fake_nvml_through_the_sampler_are_each_marked_once() -> None:
    nvml = FakeNvml([FakeDevice(gpm=False)])
    sampler = Sampler(interval=0.05, slow_interval=0.05, gpu=GpuCollector(nvml=nvml))
    history = History(seconds=60.0, fastest_interval=0.05)
    delivered: list[Snapshot] = []

    def keep(snapshot: Snapshot) -> None:
        history.add(snapshot)
        delivered.append(snapshot)

    def newest_xid() -> int | None:
        events = delivered[-1].gpus[0].xid_events if delivered else None
        return events[-1].xid if events else None

    sampler.start(keep)
    try:
        wait_until(
            lambda: bool(nvml.event_sets) and bool(nvml.event_sets[0].devices) and len(delivered) > 2,
            WAIT,
            "events registered and delivered",
            0.01,
        )
        nvml.post_xid(0, 79)
        wait_until(lambda: newest_xid() == 79, WAIT, "XID 79 in a snapshot", 0.01)
        nvml.post_xid(0, 94)
        wait_until(lambda: newest_xid() == 94, WAIT, "XID 94 in a snapshot", 0.01)
        seen = len(delivered)
        wait_until(lambda: len(delivered) > seen + 2, WAIT, "more snapshots", 0.01)
    finally:
        sampler.stop()
    marked = [index for index, bits in enumerate(xid_bits(history)) if bits]
    assert len(marked) == 2
    assert [delivered[index].gpus[0].xid_events[-1].xid for index in marked] == [79, 94]  # type: ignore[index]
    assert all(delivered[index - 1].gpus[0].xid_events != delivered[index].gpus[0].xid_events for index in marked)
