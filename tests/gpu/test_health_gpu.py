"""On a GPU machine: the health fields read from the real GPUs (energy, ECC, remapped rows, power limit, the PCIe link,
NVLink while a copy crosses it where there are two GPUs, XID registration, MIG mode) agree with raw pynvml, and cost
little."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from gpumon.sampling.nvml import GpuCollector
from gpumon.sampling.snapshot import GpuSample

PEER_COPY = """
import sys, time, torch
if torch.cuda.device_count() < 2 or not torch.cuda.can_device_access_peer(0, 1):
    print("no-peer", flush=True)
    sys.exit(0)
source = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0")
target = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:1")
target.copy_(source)
torch.cuda.synchronize(0)
torch.cuda.synchronize(1)
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(10):
        target.copy_(source)
    torch.cuda.synchronize(1)
"""


@pytest.fixture
def collector() -> Iterator[GpuCollector]:
    # Health is read every 10 s in the dashboard; here every slow tick, so two reads 2 s apart differ.
    collector = GpuCollector(health_interval=0.0)
    try:
        yield collector
    finally:
        collector.close()


@pytest.fixture(scope="module")
def raw() -> Iterator[Any]:
    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _raw_or_none(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except pynvml.NVMLError:
        return None


def test_energy_grows_by_about_the_power_drawn(collector: GpuCollector, raw: Any) -> None:
    collector.collect_fast()
    first = collector.collect_slow().fields
    started = time.monotonic()
    time.sleep(2.0)
    gpus = collector.collect_fast()
    second = collector.collect_slow().fields
    seconds = time.monotonic() - started
    for gpu in gpus:
        before, after = first[gpu.index]["energy_total"], second[gpu.index]["energy_total"]
        if before is None:
            assert (
                _raw_or_none(raw.nvmlDeviceGetTotalEnergyConsumption, raw.nvmlDeviceGetHandleByIndex(gpu.index)) is None
            ), "raw NVML has the energy counter but gpumon reports N/A"
            continue
        assert after >= before
        handle = raw.nvmlDeviceGetHandleByIndex(gpu.index)
        assert abs(raw.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0 - after) < 2000.0
        watts = (after - before) / seconds
        assert gpu.power is not None
        print(f"GPU {gpu.index}: energy {after / 1e6:.2f} MJ, {watts:.0f} W from the counter, {gpu.power:.0f} W drawn")
        assert 0.3 * gpu.power - 30 <= watts <= 3.0 * gpu.power + 30


def _each_gpu(collector: GpuCollector, raw: Any) -> list[tuple[GpuSample, Any, dict[str, Any]]]:
    """Per GPU: its fast sample, its raw NVML handle and its slow-tier fields."""
    gpus = collector.collect_fast()
    fields = collector.collect_slow().fields
    assert gpus, "no GPU read"
    return [(gpu, raw.nvmlDeviceGetHandleByIndex(gpu.index), fields[gpu.index]) for gpu in gpus]


def test_ecc_remapped_rows_power_limit_and_mig_match_raw_nvml(collector: GpuCollector, raw: Any) -> None:
    for position, (gpu, handle, got) in enumerate(_each_gpu(collector, raw)):
        for name, error_type, counter in (
            ("ecc_corrected_volatile", raw.NVML_MEMORY_ERROR_TYPE_CORRECTED, raw.NVML_VOLATILE_ECC),
            ("ecc_uncorrected_volatile", raw.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, raw.NVML_VOLATILE_ECC),
            ("ecc_corrected_aggregate", raw.NVML_MEMORY_ERROR_TYPE_CORRECTED, raw.NVML_AGGREGATE_ECC),
            ("ecc_uncorrected_aggregate", raw.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, raw.NVML_AGGREGATE_ECC),
        ):
            assert got[name] == _raw_or_none(raw.nvmlDeviceGetTotalEccErrors, handle, error_type, counter), name
        rows = _raw_or_none(raw.nvmlDeviceGetRemappedRows, handle)
        if rows is not None:
            assert (got["remapped_rows_correctable"], got["remapped_rows_uncorrectable"]) == (rows[0], rows[1])
            assert got["remapped_rows_failed"] is bool(rows[3])
        limit = raw.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
        assert collector.collect_fast()[position].power_limit == pytest.approx(limit)
        assert gpu.clock_sm_max == raw.nvmlDeviceGetMaxClockInfo(handle, raw.NVML_CLOCK_SM)
        mode = _raw_or_none(raw.nvmlDeviceGetMigMode, handle)
        assert got["mig_mode"] == (None if mode is None else mode[0] == 1)
        if not got["mig_mode"]:
            assert got["mig_instances"] == ()
        print(
            f"GPU {gpu.index}: ECC {[got[n] for n in ('ecc_corrected_volatile', 'ecc_uncorrected_volatile')]}, "
            f"remapped {rows}, fan {got['fan_speed']}, power limit {limit:.0f} W, MIG {got['mig_mode']}"
        )


def test_the_pcie_link_matches_raw_nvml_and_costs_little(collector: GpuCollector, raw: Any) -> None:
    for gpu, handle, got in _each_gpu(collector, raw):
        assert got["pcie_link_gen_max"] == raw.nvmlDeviceGetMaxPcieLinkGeneration(handle)
        assert got["pcie_link_width_max"] == raw.nvmlDeviceGetMaxPcieLinkWidth(handle)
        # The generation now may step between two reads (link power states), never above what the link can do.
        assert 1 <= got["pcie_link_gen"] <= got["pcie_link_gen_max"] <= 6
        assert got["pcie_link_width"] in (1, 2, 4, 8, 16, 32) and got["pcie_link_width"] <= got["pcie_link_width_max"]
        costs = {}
        for name in (
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "nvmlDeviceGetCurrPcieLinkWidth",
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetMaxPcieLinkWidth",
        ):
            function = getattr(raw, name)
            started = time.process_time()
            for _ in range(100):
                function(handle)
            costs[name] = (time.process_time() - started) / 100
        print(
            f"GPU {gpu.index}: PCIe Gen{got['pcie_link_gen']} x{got['pcie_link_width']} of "
            f"Gen{got['pcie_link_gen_max']} x{got['pcie_link_width_max']}; CPU per call: "
            + ", ".join(f"{name.removeprefix('nvmlDeviceGet')} {cost * 1e6:.0f} us" for name, cost in costs.items())
        )
        assert sum(costs.values()) < 0.002, "the four link calls, read every health interval, stay cheap"


def test_xid_errors_can_be_watched_and_the_thread_stops(collector: GpuCollector) -> None:
    collector.watch_xid_events()
    fields = collector.collect_slow().fields
    watched = {index: values["xid_events"] for index, values in fields.items()}
    print(f"XID events per GPU (None: not watched): {watched}")
    assert any(events is not None for events in watched.values()), "no GPU could register for XID events"
    started = time.monotonic()
    collector.close()
    assert time.monotonic() - started < 3.0


def test_nvlink_rates_while_a_copy_crosses_between_two_gpus(collector: GpuCollector, raw: Any) -> None:
    collector.collect_fast()
    collector.collect_slow()  # the health read finds NVLink; the fast tier gives its rates from then on
    gpus = collector.collect_fast()
    if len(gpus) < 2:
        print(f"one GPU: NVLink rx/tx {gpus[0].nvlink_rx}, {gpus[0].nvlink_tx}")
        pytest.skip("NVLink traffic needs two GPUs (nvidia-h200-x2)")
    load = subprocess.Popen([sys.executable, "-c", PEER_COPY, "8"], stdout=subprocess.PIPE, text=True)
    try:
        assert load.stdout is not None
        line = load.stdout.readline().strip()
        if line == "no-peer":
            pytest.skip("the two GPUs cannot reach each other peer-to-peer")
        assert line == "ready"
        collector.collect_fast()
        time.sleep(2.0)
        during = {gpu.index: gpu for gpu in collector.collect_fast()}
    finally:
        load.kill()
        load.wait()
    sent, received = during[gpus[0].index].nvlink_tx, during[gpus[1].index].nvlink_rx
    print(f"NVLink during a 0->1 copy: GPU 0 sends {sent}, GPU 1 receives {received} bytes/s")
    assert sent is not None and received is not None, "NVLink rates not read"
    assert max(sent, received) > 1e9, "a peer copy should move GB/s over NVLink"


def test_the_slow_tier_stays_cheap_with_health(collector: GpuCollector) -> None:
    collector.collect_fast()
    collector.collect_slow()
    started = time.process_time()
    rounds = 20
    for _ in range(rounds):
        collector.collect_slow()
    per_tick = (time.process_time() - started) / rounds
    print(f"slow tier: {per_tick * 1e3:.2f} ms of CPU per tick for {collector.gpu_count} GPU(s)")
    assert per_tick < 0.02 * collector.gpu_count
