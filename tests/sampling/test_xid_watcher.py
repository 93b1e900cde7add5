"""The XID watcher on its own, over the fake NVML's event sets: events kept per GPU, N/A where a GPU cannot register,
the event set freed when it stops."""

from __future__ import annotations

from fake_nvml import FakeDevice, FakeNvml

from gpumon.sampling.snapshot import XID_EVENTS_KEPT
from gpumon.sampling.xid_watcher import XidWatcher
from tests.waiting import wait_until

WAIT = 5.0


def test_events_are_kept_per_gpu_and_the_set_freed_on_stop() -> None:
    nvml = FakeNvml([FakeDevice(), FakeDevice(uuid="GPU-1", xid_events=False)])
    nvml.nvmlInit()
    handles = [(index, nvml.nvmlDeviceGetHandleByIndex(index)) for index in range(2)]
    watcher = XidWatcher(nvml, handles, clock=lambda: 42.0, wait_ms=20)
    watcher.start()
    try:
        assert watcher.running and watcher.events(0) == () and watcher.events(1) is None  # GPU 1: not watched
        for xid in range(XID_EVENTS_KEPT + 3):
            nvml.post_xid(0, 100 + xid)
        last = 100 + XID_EVENTS_KEPT + 2
        wait_until(lambda: [event.xid for event in watcher.events(0) or ()][-1:] == [last], WAIT, "the last XID", 0.01)
        kept = watcher.events(0)
        assert kept is not None and len(kept) == XID_EVENTS_KEPT and kept[0].timestamp == 42.0
    finally:
        watcher.stop()
    assert not watcher.running
    assert nvml.calls["nvmlEventSetFree"] == 1
