"""GPU health on the slow tier against a fake pynvml: fan, energy, power limit, ECC, remapped rows / retired pages,
NVLink (found by the health read, its rates on the fast tier: tests/sampling/test_nvlink_rates.py), MIG instances (no
MIG hardware was available: the fake stands in), and XID events on their own thread."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pynvml as real
import pytest
from fake_nvml import GIB, FakeClock, FakeDevice, FakeMigDevice, FakeNvml

from gpumon.sampling.nvml import GPM_NVLINK_UNIT, HEALTH_INTERVAL, QUIET_ENERGY_INTERVAL, GpuCollector
from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import XID_EVENTS_KEPT, GpuSample, MigSample, Snapshot

WAIT = 5.0
"""Upper bound on waiting for the XID thread; tests never assert on timing."""
RX, TX = real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX


def make_collector(nvml: FakeNvml, clock: FakeClock | None = None) -> GpuCollector:
    """A collector that reads health on every slow tick (by default only every HEALTH_INTERVAL)."""
    return GpuCollector(nvml=nvml, retry_interval=10.0, clock=clock or FakeClock(), health_interval=0.0)


def wait_until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_health_fields_map_with_units() -> None:
    ecc = {
        (real.NVML_MEMORY_ERROR_TYPE_CORRECTED, real.NVML_VOLATILE_ECC): 3,
        (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_VOLATILE_ECC): 0,
        (real.NVML_MEMORY_ERROR_TYPE_CORRECTED, real.NVML_AGGREGATE_ECC): 41,
        (real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, real.NVML_AGGREGATE_ECC): 2,
    }
    device = FakeDevice(gpm=False, ecc=ecc, remapped_rows=(5, 1, 1, 0), energy_mj=9_876_543)
    collector = make_collector(FakeNvml([device]))

    (gpu,) = collector.collect_fast()
    fields = collector.collect_slow().fields[0]

    assert gpu.clock_sm_max == 1980
    assert fields["fan_speed"] == 45.0
    assert fields["energy_total"] == pytest.approx(9876.543)  # mJ -> J
    assert (fields["ecc_corrected_volatile"], fields["ecc_uncorrected_volatile"]) == (3, 0)
    assert (fields["ecc_corrected_aggregate"], fields["ecc_uncorrected_aggregate"]) == (41, 2)
    assert (fields["remapped_rows_correctable"], fields["remapped_rows_uncorrectable"]) == (5, 1)
    assert fields["remapped_rows_pending"] is True and fields["remapped_rows_failed"] is False
    assert fields["retired_pages"] is None, "a GPU that remaps rows does not retire pages"
    assert fields["mig_mode"] is False and fields["mig_instances"] == ()
    assert fields["xid_events"] is None, "XID errors are not watched until asked"


def test_health_is_read_once_every_health_interval() -> None:
    """About 6 ms of CPU per H200 (the energy counter alone 4 ms): not on every slow tick."""
    device = FakeDevice(gpm=False, energy_mj=1000)
    nvml = FakeNvml([device])
    clock = FakeClock()
    collector = GpuCollector(nvml=nvml, clock=clock)
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(1.0)
    device.energy_mj = 5000
    clock.advance(HEALTH_INTERVAL / 2)
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(1.0), "the last reading, repeated"
    clock.advance(HEALTH_INTERVAL / 2)
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(5.0)
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert nvml.calls["nvmlDeviceGetTemperature"] == 3, "temperature stays on every slow tick"


def test_the_energy_counter_is_read_at_its_own_rarer_interval_and_repeated_between() -> None:
    """Of a health read's ~6 ms on an H200, 4 ms are the energy counter: a Sampler told that no job needs joules per
    sample reads it every QUIET_ENERGY_INTERVAL, the rest of health every HEALTH_INTERVAL; told otherwise, at every
    health read again."""
    device = FakeDevice(gpm=False, energy_mj=1000)
    nvml = FakeNvml([device])
    clock = FakeClock()
    collector = GpuCollector(nvml=nvml, clock=clock)
    sampler = Sampler(gpu=collector)
    sampler.read_energy_often(False)
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(1.0)
    device.energy_mj = 5000
    for _ in range(int(QUIET_ENERGY_INTERVAL / HEALTH_INTERVAL) - 1):
        clock.advance(HEALTH_INTERVAL)
        assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(1.0), "the last reading, repeated"
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert nvml.calls["nvmlDeviceGetEnforcedPowerLimit"] >= int(QUIET_ENERGY_INTERVAL / HEALTH_INTERVAL)
    clock.advance(HEALTH_INTERVAL)
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(5.0)
    sampler.read_energy_often(True)
    device.energy_mj = 9000
    clock.advance(HEALTH_INTERVAL)
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(9.0)
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 3


def test_the_power_limit_follows_a_change_while_running() -> None:
    device = FakeDevice(gpm=False)
    collector = make_collector(FakeNvml([device]))
    assert collector.collect_fast()[0].power_limit == pytest.approx(700.0)
    device.power_limit_mw = 500_000  # nvidia-smi -pl 500
    collector.collect_slow()
    assert collector.collect_fast()[0].power_limit == pytest.approx(500.0)


def test_the_default_power_limit_is_read_once_and_none_where_unsupported() -> None:
    """The card's default limit, beside the enforced one: a limit set below it was lowered (nvidia-smi -pl)."""
    device = FakeDevice(gpm=False, power_limit_mw=400_000, power_limit_default_mw=700_000)
    nvml = FakeNvml([device])
    collector = make_collector(nvml)
    for _ in range(3):
        fields = collector.collect_slow().fields[0]
        assert fields["power_limit_default"] == pytest.approx(700.0)  # mW -> W
    assert collector.collect_fast()[0].power_limit == pytest.approx(400.0)
    assert nvml.calls["nvmlDeviceGetPowerManagementDefaultLimit"] == 1, "fixed for the card: asked once"

    unsupported = FakeNvml([FakeDevice(gpm=False, unsupported={"nvmlDeviceGetPowerManagementDefaultLimit"})])
    collector = make_collector(unsupported)
    for _ in range(3):
        assert collector.collect_slow().fields[0]["power_limit_default"] is None
    assert unsupported.calls["nvmlDeviceGetPowerManagementDefaultLimit"] == 1, "unsupported: not asked again"


def test_retired_pages_where_rows_are_not_remapped() -> None:
    device = FakeDevice(
        gpm=False,
        unsupported={"nvmlDeviceGetRemappedRows"},
        retired_pages={
            real.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: [0x1000, 0x2000],
            real.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: [0x3000],
        },
        retired_pages_pending=1,
    )
    fields = make_collector(FakeNvml([device])).collect_slow().fields[0]
    assert fields["remapped_rows_correctable"] is None and fields["remapped_rows_pending"] is None
    assert fields["retired_pages"] == 3 and fields["retired_pages_pending"] is True


def test_the_pcie_link_now_and_at_most_and_none_where_unsupported() -> None:
    narrow = FakeDevice(gpm=False, pcie_link=(4, 8, 5, 16))
    fields = make_collector(FakeNvml([narrow])).collect_slow().fields[0]
    assert (fields["pcie_link_gen"], fields["pcie_link_width"]) == (4, 8)
    assert (fields["pcie_link_gen_max"], fields["pcie_link_width_max"]) == (5, 16)

    bare = FakeDevice(gpm=False, unsupported={"nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetMaxPcieLinkWidth"})
    nvml = FakeNvml([bare])
    collector = make_collector(nvml)
    for _ in range(3):
        fields = collector.collect_slow().fields[0]
        assert fields["pcie_link_gen"] == 5 and fields["pcie_link_width"] is None
        assert fields["pcie_link_width_max"] is None
    assert nvml.calls["nvmlDeviceGetCurrPcieLinkWidth"] == 1, "unsupported: asked once"
    assert nvml.calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 3


def test_unsupported_health_calls_are_not_retried_but_passing_failures_are() -> None:
    device = FakeDevice(
        gpm=False,
        unsupported={"nvmlDeviceGetFanSpeed", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetMigMode"},
        not_ready={"nvmlDeviceGetTotalEnergyConsumption"},
    )
    nvml = FakeNvml([device])
    collector = make_collector(nvml)

    for _ in range(4):
        fields = collector.collect_slow().fields[0]
        assert fields["fan_speed"] is None and fields["ecc_uncorrected_aggregate"] is None
        assert fields["energy_total"] is None and fields["mig_mode"] is None

    assert nvml.calls["nvmlDeviceGetFanSpeed"] == 1
    assert nvml.calls["nvmlDeviceGetTotalEccErrors"] == 4, "one try for each of the 4 counters, then none"
    assert nvml.calls["nvmlDeviceGetMigMode"] == 1
    assert nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] == 4, "NotReady passes: tried again every tick"
    device.not_ready.clear()
    assert collector.collect_slow().fields[0]["energy_total"] == pytest.approx(123456.789)


def test_nvlink_rates_from_the_all_links_counters() -> None:
    device = FakeDevice(gpm=False, nvlink_kib={(RX, 0): 1000, (TX, 0): 500, (RX, 1): 1000, (TX, 1): 500})
    clock = FakeClock()
    collector = make_collector(FakeNvml([device]), clock)

    assert collector.collect_fast()[0].nvlink_rx is None, "NVLink not known before the first health read"
    health = collector.collect_slow().fields[0]
    assert "nvlink_rx" not in health and "nvlink_tx" not in health, "the health read finds NVLink, gives no rate"
    device.nvlink_kib.update({(RX, 0): 1000 + 2048, (RX, 1): 1000 + 2048, (TX, 0): 500 + 1024})
    clock.advance(2.0)
    gpu = collector.collect_fast()[0]

    assert gpu.nvlink_rx == pytest.approx(4096 * 1024 / 2.0)
    assert gpu.nvlink_tx == pytest.approx(1024 * 1024 / 2.0)


def test_nvlink_links_are_summed_where_the_all_links_scope_is_missing() -> None:
    device = FakeDevice(gpm=False, nvlink_all_links=False, nvlink_kib={(RX, 3): 0, (TX, 3): 0, (RX, 7): 0, (TX, 7): 0})
    nvml = FakeNvml([device])
    clock = FakeClock()
    collector = make_collector(nvml, clock)

    collector.collect_slow()
    device.nvlink_kib.update({(RX, 3): 1024, (RX, 7): 3072, (TX, 7): 512})
    clock.advance(1.0)
    gpu = collector.collect_fast()[0]

    assert gpu.nvlink_rx == pytest.approx(4096 * 1024)
    assert gpu.nvlink_tx == pytest.approx(512 * 1024)
    # the all-links scope is asked once, then the links (health read, fast tick); memory temperature and PCIe
    # replays once (absent here)
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 4


def test_a_gpu_without_nvlink_is_asked_twice_then_never() -> None:
    nvml = FakeNvml([FakeDevice(gpm=False)])
    collector = make_collector(nvml)
    for _ in range(5):
        gpu = collector.collect_fast()[0]
        assert "nvlink_rx" not in collector.collect_slow().fields[0]
    assert gpu.nvlink_rx is None and gpu.nvlink_tx is None
    # the all-links scope, then the links one by one; memory temperature and PCIe replays once (absent here)
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 3


def _gpm_nvlink_device() -> FakeDevice:
    """A GPU with GPM whose NVLink metrics say 300 units in and 100 out, and NVLink counters."""
    device = FakeDevice(nvlink_kib={(RX, 0): 0, (TX, 0): 0})
    device.gpm_values[real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC] = 300.0
    device.gpm_values[real.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC] = 100.0
    return device


def _primed(device: FakeDevice) -> tuple[FakeNvml, FakeClock, GpuCollector]:
    """A collector that took a GPM sample and read health once (its counters tell whether the GPU has NVLink),
    one second before."""
    nvml, clock = FakeNvml([device]), FakeClock()
    collector = make_collector(nvml, clock)
    collector.collect_fast()
    collector.collect_slow()
    clock.advance(1.0)
    return nvml, clock, collector


def test_gpm_gives_nvlink_rates_each_fast_tick_and_the_health_read_stops_reading_the_counters() -> None:
    nvml, clock, collector = _primed(_gpm_nvlink_device())
    gpu = collector.collect_fast()[0]
    counter_reads = nvml.calls["nvmlDeviceGetFieldValues"]
    for _ in range(3):
        clock.advance(1.0)
        collector.collect_slow()

    assert gpu.nvlink_rx == 300.0 * GPM_NVLINK_UNIT and gpu.nvlink_tx == 100.0 * GPM_NVLINK_UNIT
    assert nvml.calls["nvmlDeviceGetFieldValues"] == counter_reads, "GPM's rates replace the counters"


def test_gpm_nvlink_is_not_trusted_on_a_gpu_whose_counters_say_it_has_no_nvlink() -> None:
    device = _gpm_nvlink_device()
    device.nvlink_kib.clear()
    _, _, collector = _primed(device)
    gpu = collector.collect_fast()[0]

    assert gpu.nvlink_rx is None and gpu.nvlink_tx is None


def test_the_counters_take_over_again_when_gpm_stops_giving_nvlink() -> None:
    device = _gpm_nvlink_device()
    _, clock, collector = _primed(device)
    collector.collect_fast()
    del device.gpm_values[real.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC]
    clock.advance(1.0)
    gpu = collector.collect_fast()[0]
    device.nvlink_kib[(RX, 0)] = 2048.0
    clock.advance(2.0)
    later = collector.collect_fast()[0]

    assert gpu.nvlink_rx is None, "the counters' first reading makes no rate"
    assert later.nvlink_rx == pytest.approx(2048 * 1024 / 2.0), "a fresh pair of counter readings"


def test_mig_instances_are_read_when_mig_mode_is_on() -> None:
    small = FakeMigDevice(uuid="MIG-a", gpu_instance_id=7)
    large = FakeMigDevice(
        name="NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        uuid="MIG-b",
        memory_total=40 * GIB,
        memory_used=30 * GIB,
        gpu_instance_id=1,
        compute_instance_id=0,
    )
    device = FakeDevice(gpm=False, utilization_gpu=0, mig_mode=1, mig_devices=[small, None, large])
    fields = make_collector(FakeNvml([device])).collect_slow().fields[0]

    assert fields["mig_mode"] is True
    assert fields["mig_instances"] == (
        MigSample(
            index=0,
            uuid="MIG-a",
            name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
            gpu_instance_id=7,
            compute_instance_id=0,
            memory_used=2 * GIB,
            memory_total=10 * GIB,
        ),
        MigSample(
            index=2,
            uuid="MIG-b",
            name="NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            gpu_instance_id=1,
            compute_instance_id=0,
            memory_used=30 * GIB,
            memory_total=40 * GIB,
        ),
    ), "the empty slot 1 is skipped"
    assert fields["mig_instances"][1].memory_percent == pytest.approx(75.0)


def test_xid_events_are_watched_on_their_own_thread_and_kept_bounded() -> None:
    nvml = FakeNvml([FakeDevice(gpm=False, uuid="GPU-a"), FakeDevice(gpm=False, uuid="GPU-b", xid_events=False)])
    collector = make_collector(nvml)
    try:
        collector.watch_xid_events()
        first = collector.collect_slow().fields
        assert first[0]["xid_events"] == () and first[1]["xid_events"] is None, "GPU 1 cannot register: N/A"

        nvml.post_xid(0, 79)
        assert wait_until(lambda: bool(collector.collect_slow().fields[0]["xid_events"]))
        (event,) = collector.collect_slow().fields[0]["xid_events"]
        assert event.xid == 79 and abs(event.timestamp - time.time()) < 60

        for code in range(100, 100 + 2 * XID_EVENTS_KEPT):
            nvml.post_xid(0, code)
        last = 100 + 2 * XID_EVENTS_KEPT - 1
        assert wait_until(lambda: collector.collect_slow().fields[0]["xid_events"][-1].xid == last)
        kept = collector.collect_slow().fields[0]["xid_events"]
        assert len(kept) == XID_EVENTS_KEPT and kept[0].xid == last - XID_EVENTS_KEPT + 1
    finally:
        collector.close()
    (event_set,) = nvml.event_sets
    assert event_set.freed, "close() ends the thread, which frees its event set"
    assert nvml.initialized == 0


def test_xid_watching_ends_when_nvml_fails_and_restarts_when_it_recovers() -> None:
    nvml = FakeNvml([FakeDevice(gpm=False)])
    clock = FakeClock()
    collector = GpuCollector(nvml=nvml, retry_interval=10.0, clock=clock, health_interval=0.0)
    try:
        collector.watch_xid_events()
        nvml.broken = "NVML_ERROR_DRIVER_NOT_LOADED"
        assert collector.collect_fast() == ()
        assert wait_until(lambda: nvml.event_sets[0].freed), "the thread sees NVML fail, frees its set and ends"

        nvml.broken = None
        clock.advance(10.0)
        collector.collect_fast()
        assert len(nvml.event_sets) == 2, "NVML came back: a new event set"
        nvml.post_xid(0, 48)
        assert wait_until(lambda: (collector.collect_slow().fields[0]["xid_events"] or [None])[-1] is not None)
    finally:
        collector.close()


def test_the_sampler_delivers_health_mig_and_xid_events_and_they_survive_a_recording() -> None:
    device = FakeDevice(gpm=False, mig_mode=1, mig_devices=[FakeMigDevice()])
    nvml = FakeNvml([device])
    sampler = Sampler(interval=0.05, slow_interval=0.05, gpu=GpuCollector(nvml=nvml))
    delivered: list[Snapshot] = []
    sampler.start(delivered.append)
    try:
        assert wait_until(lambda: bool(nvml.event_sets) and bool(nvml.event_sets[0].devices))
        nvml.post_xid(0, 94)
        assert wait_until(lambda: bool(delivered) and bool(delivered[-1].gpus[0].xid_events))
    finally:
        sampler.stop()
    gpu: GpuSample = delivered[-1].gpus[0]
    assert gpu.fan_speed == 45.0 and gpu.energy_total is not None and gpu.mig_mode is True
    assert len(gpu.mig_instances) == 1 and gpu.xid_events is not None and gpu.xid_events[-1].xid == 94
    assert nvml.event_sets[0].freed

    line = json.dumps(delivered[-1].to_dict())
    assert Snapshot.from_dict(json.loads(line)) == delivered[-1]
