"""GpuCollector against a fake pynvml: field mapping, absent fields, GPM, and NVML failing at start or mid-run."""

from __future__ import annotations

import pynvml as real
import pytest
from fake_nvml import GIB, FakeClock, FakeDevice, FakeNvml

from gpumon.sampling.nvml import GPM_MIN_WINDOW, GpuCollector, GpuProcess
from gpumon.sampling.nvml_api import decode_clock_events


def make_collector(
    nvml: FakeNvml, clock: FakeClock | None = None, retry_interval: float = 10.0, graphics_activity: bool = False
) -> GpuCollector:
    return GpuCollector(
        nvml=nvml, retry_interval=retry_interval, clock=clock or FakeClock(), graphics_activity=graphics_activity
    )


def test_fast_fields_map_with_unit_conversions() -> None:
    nvml = FakeNvml([FakeDevice(gpm=False)])
    collector = make_collector(nvml)

    (gpu,) = collector.collect_fast()

    assert collector.error is None
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "NVIDIA H100 80GB HBM3", "GPU-00000000-0000-0000-0000-000000000000")
    assert gpu.utilization_gpu == 87.0 and gpu.utilization_memory == 42.0
    assert gpu.memory_used == 10 * GIB, "v2 memory info ('used' as nvidia-smi shows it) is preferred"
    assert gpu.memory_total == 80 * GIB
    assert gpu.memory_free == 70 * GIB, "NVML's own free figure (DCGM's FB_FREE)"
    assert gpu.power == pytest.approx(350.0) and gpu.power_limit == pytest.approx(700.0)  # mW -> W
    assert (gpu.clock_sm, gpu.clock_memory) == (1980, 2619)
    assert gpu.sm_activity is None and not gpu.has_gpm
    assert gpu.temperature is None, "temperature belongs to the slow tier"
    assert collector.driver_version == "580.95.05"


def test_memory_falls_back_to_v1_where_v2_is_missing() -> None:
    nvml = FakeNvml([FakeDevice(memory_v2=False)])
    (gpu,) = make_collector(nvml).collect_fast()
    assert gpu.memory_used == 11 * GIB


def test_static_fields_are_read_once() -> None:
    nvml = FakeNvml([FakeDevice(gpm=False)])
    collector = make_collector(nvml)
    for _ in range(5):
        collector.collect_fast()
    assert nvml.calls["nvmlDeviceGetName"] == 1
    assert nvml.calls["nvmlDeviceGetUUID"] == 1
    assert nvml.calls["nvmlDeviceGetEnforcedPowerLimit"] == 1
    assert nvml.calls["nvmlGpmQueryDeviceSupport"] == 1
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 5


def test_unsupported_calls_leave_fields_absent() -> None:
    device = FakeDevice(
        gpm=False,
        unsupported={
            "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetPowerManagementLimit",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            "nvmlDeviceGetPcieThroughput",
            "nvmlDeviceGetProcessUtilization",
        },
        compute_processes=[(4242, None)],
    )
    collector = make_collector(FakeNvml([device]))

    (gpu,) = collector.collect_fast()
    slow = collector.collect_slow()

    assert collector.error is None
    assert gpu.utilization_gpu == 87.0
    assert gpu.power is None and gpu.power_limit is None
    assert gpu.clock_sm is None and gpu.clock_memory is None
    basic = {name: slow.fields[0][name] for name in ("temperature", "throttle_reasons", "pcie_rx", "pcie_tx")}
    assert basic == {"temperature": None, "throttle_reasons": None, "pcie_rx": None, "pcie_tx": None}
    assert slow.processes == (GpuProcess(pid=4242, gpu_index=0, used_memory=None, sm_percent=87.0),), (
        "the only process on a GPU has the GPU's utilization as its SM%"
    )


def test_slow_fields_and_processes() -> None:
    device = FakeDevice(
        gpm=False,
        clock_events=0x4 | 0x40,
        compute_processes=[(100, 3 * GIB), (200, 1 * GIB)],
        graphics_processes=[(100, 2 * GIB)],
        process_utilization=[(100, 10, 20), (100, 30, 64), (200, 20, 5)],
    )
    collector = make_collector(FakeNvml([device]))

    slow = collector.collect_slow()

    assert slow.fields[0]["temperature"] == 61.0
    assert slow.fields[0]["throttle_reasons"] == ("sw_power_cap", "hw_thermal")
    assert slow.fields[0]["pcie_rx"] == 2048 * 1024.0 and slow.fields[0]["pcie_tx"] == 1024 * 1024.0  # KB/s -> B/s
    by_pid = {process.pid: process for process in slow.processes}
    assert by_pid[100].used_memory == 3 * GIB, "a pid in both lists is counted once"
    assert by_pid[100].sm_percent == 64.0, "the newest utilization sample wins"
    assert by_pid[200].sm_percent == 5.0

    again = collector.collect_slow()
    assert {process.pid: process.sm_percent for process in again.processes} == {100: None, 200: None}, (
        "no samples newer than the last seen timestamp: NVML says NotFound, SM% is unknown"
    )


def test_a_sole_process_takes_the_gpu_utilization_without_the_per_process_query() -> None:
    device = FakeDevice(gpm=False, compute_processes=[(100, 3 * GIB)], process_utilization=[(100, 10, 20)])
    nvml = FakeNvml([device])
    collector = make_collector(nvml)

    assert collector.collect_slow().processes[0].sm_percent == 20.0, "before any fast tick: NVML's per-process figure"
    (gpu,) = collector.collect_fast()
    (process,) = collector.collect_slow().processes

    assert process.sm_percent == gpu.utilization_gpu
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 1

    device.compute_processes = [(100, 3 * GIB), (200, 1 * GIB)]
    device.process_utilization = [(100, 40, 30), (200, 40, 7)]
    by_pid = {process.pid: process.sm_percent for process in collector.collect_slow().processes}
    assert by_pid == {100: 30.0, 200: 7.0}, "two processes on the GPU: each gets its own NVML figure"


def test_decode_clock_events_names_each_bit() -> None:
    assert decode_clock_events(0) == ()
    expected = ("idle", "hw_slowdown", "sync_boost", "sw_thermal", "hw_power_brake")
    assert decode_clock_events(0x1 | 0x8 | 0x10 | 0x20 | 0x80) == expected
    assert decode_clock_events(0x10000) == ("0x10000",)


@pytest.mark.parametrize("graphics_activity", [False, True])
def test_gpm_reading_needs_two_samples_100ms_apart(graphics_activity: bool) -> None:
    """GPM's graphics engine activity only where asked (dcgm-exporter's GR_ENGINE_ACTIVE): the dashboard shows none."""
    clock = FakeClock()
    nvml = FakeNvml([FakeDevice(gpm=True)])
    collector = make_collector(nvml, clock, graphics_activity=graphics_activity)

    (first,) = collector.collect_fast()
    assert first.sm_activity is None, "one GPM sample makes no reading"

    clock.advance(GPM_MIN_WINDOW / 2)
    (too_soon,) = collector.collect_fast()
    assert too_soon.sm_activity is None
    assert nvml.calls["nvmlGpmSampleGet"] == 1, "no new sample is taken within 100 ms"

    clock.advance(GPM_MIN_WINDOW)
    (second,) = collector.collect_fast()
    assert second.sm_activity == 71.5
    assert second.sm_occupancy == 33.0
    assert second.tensor_activity == 55.25
    assert second.dram_bandwidth == 12.0
    assert second.graphics_activity == (80.5 if graphics_activity else None)
    assert second.pcie_rx == 100.0 * 1024 * 1024 and second.pcie_tx == 50.0 * 1024 * 1024  # MiB/s -> B/s
    assert second.has_gpm

    clock.advance(1.0)
    nvml.devices[0].gpm_values[real.NVML_GPM_METRIC_SM_UTIL] = 12.5
    (third,) = collector.collect_fast()
    assert third.sm_activity == 12.5, "each reading uses the newest pair of samples"
    assert nvml.calls["nvmlGpmMetricsGet"] == 2
    assert len(nvml.allocated) == 2, "two sample buffers are allocated once and reused"


def test_gpm_pcie_skips_the_blocking_pcie_call() -> None:
    clock = FakeClock()
    nvml = FakeNvml([FakeDevice(gpm=True)])
    collector = make_collector(nvml, clock)
    collector.collect_fast()
    clock.advance(1.0)
    collector.collect_fast()

    slow = collector.collect_slow()

    assert nvml.calls["nvmlDeviceGetPcieThroughput"] == 0
    assert "pcie_rx" not in slow.fields[0]


def test_gpm_metric_a_device_lacks_is_absent() -> None:
    clock = FakeClock()
    device = FakeDevice(gpm=True)
    del device.gpm_values[real.NVML_GPM_METRIC_PCIE_RX_PER_SEC]
    nvml = FakeNvml([device])
    collector = make_collector(nvml, clock)
    collector.collect_fast()
    clock.advance(1.0)

    (gpu,) = collector.collect_fast()
    slow = collector.collect_slow()

    assert gpu.sm_activity == 71.5 and gpu.pcie_rx is None
    assert slow.fields[0]["pcie_rx"] == 2048 * 1024.0, "without GPM PCIe, the slow tier reads PCIe throughput"


def test_gpm_only_on_supporting_devices() -> None:
    clock = FakeClock()
    nvml = FakeNvml([FakeDevice(gpm=True, uuid="GPU-a"), FakeDevice(gpm=False, uuid="GPU-b", name="Tesla V100")])
    collector = make_collector(nvml, clock)
    collector.collect_fast()
    clock.advance(1.0)

    hopper, volta = collector.collect_fast()

    assert hopper.has_gpm and hopper.tensor_activity == 55.25
    assert not volta.has_gpm and volta.tensor_activity is None and volta.dram_bandwidth is None
    assert collector.gpm_supported == {0: True, 1: False}


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVIDIA driver not found (libnvidia-ml.so.1 missing)"),
        ("NVML_ERROR_NO_PERMISSION", "NVML: insufficient permissions"),
        ("NVML_ERROR_DRIVER_NOT_LOADED", "NVIDIA driver not loaded"),
    ],
)
def test_init_failure_gives_one_line_and_no_gpus(error: str, message: str) -> None:
    collector = make_collector(FakeNvml(init_error=error))

    assert collector.collect_fast() == ()
    assert collector.collect_slow().processes == ()
    assert collector.error == message
    collector.close()


def test_no_gpu() -> None:
    collector = make_collector(FakeNvml(devices=[]))
    assert collector.collect_fast() == ()
    assert collector.error == "no NVIDIA GPU found"


def test_missing_pynvml_module(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpumon.sampling.nvml as nvml_module

    def no_pynvml() -> None:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_module, "import_pynvml", no_pynvml)
    collector = GpuCollector()

    assert collector.collect_fast() == ()
    assert collector.error is not None and "nvidia-ml-py" in collector.error
    collector.close()


def test_gpu_lost_mid_run_drops_it_and_recovers() -> None:
    clock = FakeClock()
    nvml = FakeNvml([FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b")])
    collector = make_collector(nvml, clock, retry_interval=10.0)
    assert len(collector.collect_fast()) == 2

    nvml.devices[1].lost = True
    clock.advance(1.0)
    gpus = collector.collect_fast()
    assert [gpu.uuid for gpu in gpus] == ["GPU-a"]
    assert collector.error is not None and collector.error.startswith("GPU 1 lost (GPU is lost)")
    assert "\n" not in collector.error
    clock.advance(1.0)
    assert [gpu.index for gpu in collector.collect_fast()] == [0], "no retry before the retry interval"

    nvml.devices[1].lost = False
    clock.advance(10.0)
    gpus = collector.collect_fast()
    assert [gpu.uuid for gpu in gpus] == ["GPU-a", "GPU-b"]
    assert collector.error is None
    assert all(sample.freed for sample in nvml.allocated[2:4]), "the lost GPU's GPM buffers were freed"


def test_driver_gone_mid_run_drops_all_and_reinitializes() -> None:
    clock = FakeClock()
    nvml = FakeNvml([FakeDevice()])
    collector = make_collector(nvml, clock, retry_interval=10.0)
    assert len(collector.collect_fast()) == 1

    nvml.broken = "NVML_ERROR_UNKNOWN"
    assert collector.collect_fast() == ()
    assert collector.error is not None and collector.error.startswith("NVML failed (Unknown Error)")
    assert collector.collect_slow().processes == ()

    nvml.init_error = "NVML_ERROR_DRIVER_NOT_LOADED"
    clock.advance(10.0)
    assert collector.collect_fast() == ()
    assert collector.error == "NVIDIA driver not loaded"

    nvml.init_error = None
    clock.advance(10.0)
    (gpu,) = collector.collect_fast()
    assert gpu.utilization_gpu == 87.0 and collector.error is None


def test_close_frees_gpm_and_shuts_down() -> None:
    nvml = FakeNvml([FakeDevice(gpm=True)])
    collector = make_collector(nvml)
    collector.collect_fast()

    collector.close()
    collector.close()

    assert nvml.initialized == 0
    assert nvml.calls["nvmlShutdown"] == 1
    assert all(sample.freed for sample in nvml.allocated)
