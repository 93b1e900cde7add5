"""The collector over real recorded snapshots: names, units, labels and values as the exposition text shows them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from exporter_helpers import RECORDINGS, only, samples
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.labels import PlacementCache
from gpumon.exporter.metrics import GPU_GAUGES, THROTTLE_REASONS, EnergyMeter
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import GpuSample, MigSample, ProcessSample, Snapshot, XidEvent


def exposition(collector: SnapshotCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return samples(generate_latest(registry).decode())


@pytest.fixture(scope="module")
def training() -> list[Snapshot]:
    return read_recording(RECORDINGS / "h100-training.jsonl")


def replaying(host: str = "node-a", **options: object) -> SnapshotCollector:
    return SnapshotCollector(host, placements=PlacementCache(enabled=False), source="replay", **options)  # type: ignore[arg-type]  # options are the keyword-only flags


def test_before_any_sample_only_the_exporter_info() -> None:
    found = exposition(replaying())
    labels, value = only(found["gpumon_exporter_info"])
    assert labels["has_sample"] == "0" and value == 1.0
    assert not any(name.startswith("gpumon_gpu_") for name in found)


def test_gpu_metrics_match_the_recording(training: list[Snapshot]) -> None:
    collector = replaying()
    snapshot = training[-1]
    collector.on_snapshot(snapshot)
    found = exposition(collector)
    gpu = snapshot.gpus[0]
    labels, value = only(found["gpumon_gpu_utilization_ratio"])
    assert labels == {"host": "node-a", "gpu": "0", "uuid": gpu.uuid, "namespace": "", "pod": "", "container": ""}
    assert gpu.utilization_gpu is not None and value == pytest.approx(gpu.utilization_gpu / 100)
    assert only(found["gpumon_gpu_memory_used_bytes"])[1] == gpu.memory_used
    assert only(found["gpumon_gpu_memory_total_bytes"])[1] == gpu.memory_total
    assert gpu.sm_activity is not None and gpu.clock_sm is not None
    assert only(found["gpumon_gpu_sm_active_ratio"])[1] == pytest.approx(gpu.sm_activity / 100)
    assert only(found["gpumon_gpu_clock_sm_hertz"])[1] == gpu.clock_sm * 1e6
    assert only(found["gpumon_gpu_pcie_rx_bytes_per_second"])[1] == pytest.approx(gpu.pcie_rx)
    for gauge in GPU_GAUGES:  # a series exactly for each field the recording holds
        assert (gauge.name in found) == (getattr(gpu, gauge.field) is not None), gauge.name
    info_labels, _ = only(found["gpumon_gpu_info"])
    assert info_labels["model"] == gpu.name and info_labels["driver"] == snapshot.driver_version
    reasons = {labels["reason"]: value for labels, value in found["gpumon_gpu_throttle_reason"]}
    assert set(reasons) == set(THROTTLE_REASONS) and set(reasons.values()) == {0.0}
    assert "gpumon_gpu_xid_errors_total" not in found  # not watched in this recording: no made-up 0
    assert only(found["gpumon_gpu_sampling_up"])[1] == 1.0
    assert only(found["gpumon_snapshot_timestamp_seconds"])[1] == snapshot.timestamp


def test_processes_and_their_workers(training: list[Snapshot]) -> None:
    collector = replaying()
    snapshot = training[-1]
    collector.on_snapshot(snapshot)
    found = exposition(collector)
    main = snapshot.processes[0]
    gpu_rows = [(labels, value) for labels, value in found["gpumon_process_gpu_memory_bytes"]]
    labels, value = only(gpu_rows)
    assert (labels["pid"], labels["command"], labels["gpu"], labels["role"]) == (
        str(main.pid),
        "python3 training_load.py",
        "0",
        "gpu",
    )
    assert value == main.gpu_memory
    assert main.children and all(not child.gpu_indices for child in main.children)
    # By default the DataLoader workers are counted and summed under their process, with no series of their own.
    assert all(labels["role"] == "gpu" for labels, _ in found["gpumon_process_cpu_ratio"])
    worker_labels, count = only(found["gpumon_process_workers"])
    assert worker_labels == labels and count == len(main.children)
    cpu = sum(child.cpu_percent or 0.0 for child in main.children) / 100
    assert only(found["gpumon_process_workers_cpu_ratio"])[1] == pytest.approx(cpu)
    rss = sum(child.rss or 0 for child in main.children)
    assert rss > 0 and only(found["gpumon_process_workers_resident_memory_bytes"])[1] == rss
    assert "--duration" not in str(found)


def test_per_worker_series_only_when_asked(training: list[Snapshot]) -> None:
    collector = replaying(per_worker_series=True)
    snapshot = training[-1]
    collector.on_snapshot(snapshot)
    found = exposition(collector)
    main = snapshot.processes[0]
    workers = [labels for labels, _ in found["gpumon_process_cpu_ratio"] if labels["role"] == "worker"]
    assert sorted(int(labels["pid"]) for labels in workers) == sorted(child.pid for child in main.children)
    assert all(labels["gpu"] == "" for labels in workers)
    assert only(found["gpumon_process_workers"])[1] == len(main.children)  # the aggregates stay


def test_worker_aggregates_count_only_measured_workers_and_keep_gpu_children_apart() -> None:
    gpu_child = ProcessSample(pid=11, command="python3 rank.py", gpu_indices=(1,), gpu_memory=5, cpu_percent=90.0)
    unmeasured = ProcessSample(pid=12, command="python3 train.py")  # psutil could not read it
    lonely = ProcessSample(pid=20, command="python3 idle.py", gpu_indices=(0,), gpu_memory=1)
    parent = ProcessSample(
        pid=10, command="torchrun train.py", cpu_percent=10.0, rss=7, children=(gpu_child, unmeasured)
    )
    collector = replaying()
    collector.on_snapshot(Snapshot(timestamp=1.0, processes=(parent, lonely)))
    found = exposition(collector)
    gpu_rows = {labels["pid"]: (labels["role"], value) for labels, value in found["gpumon_process_gpu_memory_bytes"]}
    assert gpu_rows == {"11": ("gpu", 5.0), "20": ("gpu", 1.0)}  # a child on a GPU keeps its own series
    counts = {labels["pid"]: value for labels, value in found["gpumon_process_workers"]}
    assert counts == {"10": 1.0, "20": 0.0}
    cpu = {labels["pid"]: value for labels, value in found["gpumon_process_workers_cpu_ratio"]}
    assert cpu == {"20": 0.0}  # pid 10's one worker was not measured: no made-up 0


def test_full_command_only_when_asked(training: list[Snapshot]) -> None:
    collector = replaying(full_command=True)
    collector.on_snapshot(training[-1])
    labels, _ = only(exposition(collector)["gpumon_process_gpu_memory_bytes"])
    assert labels["command"] == training[-1].processes[0].command


def test_hostile_strings_reach_labels_printable_and_bounded() -> None:
    hostile = "\x1b]0;pwned\x07\x1b[2J" + "x" * 5000
    snapshot = Snapshot(
        timestamp=1.0e9,
        hostname="h\x1bost",
        driver_version="5\x9b80",
        gpus=(
            GpuSample(
                index=0,
                uuid="GPU-\x1b[31m",
                name=hostile,
                utilization_gpu=50.0,
                throttle_reasons=("hw_slowdown", "0x8000\x1b"),
            ),
        ),
        processes=(ProcessSample(pid=5, command=hostile, gpu_indices=(0,), gpu_memory=1),),
    )
    collector = SnapshotCollector(None, full_command=True, placements=PlacementCache(enabled=False))
    collector.on_snapshot(snapshot)
    found = exposition(collector)
    info, _ = only(found["gpumon_gpu_info"])
    assert info["host"] == "h\\x1bost" and info["uuid"] == "GPU-\\x1b[31m" and info["driver"] == "5\\x9b80"
    assert info["model"].startswith("\\x1b]0;pwned\\x07\\x1b[2J") and len(info["model"]) == 128
    process, _ = only(found["gpumon_process_gpu_memory_bytes"])
    assert len(process["command"]) == 128 and "\x1b" not in process["command"]
    reasons = {labels["reason"]: value for labels, value in found["gpumon_gpu_throttle_reason"]}
    assert reasons["hw_slowdown"] == 1.0 and reasons["0x8000\\x1b"] == 1.0 and reasons["idle"] == 0.0


def test_a_gpu_without_a_field_has_no_series() -> None:
    snapshot = Snapshot(
        timestamp=1.0e9, gpus=(GpuSample(index=0, uuid="GPU-a", name="old", utilization_gpu=10.0),), gpu_error=None
    )
    collector = replaying()
    collector.on_snapshot(snapshot)
    found = exposition(collector)
    assert "gpumon_gpu_sm_active_ratio" not in found and "gpumon_gpu_power_watts" not in found
    assert "gpumon_gpu_throttle_reason" not in found
    failed = replace(snapshot, gpus=(), gpu_error="NVML failed (\x1b[31m); retrying")
    collector.on_snapshot(failed)
    labels, value = only(exposition(collector)["gpumon_gpu_sampling_up"])
    assert value == 0.0 and labels["error"] == "NVML failed (\\x1b[31m); retrying"


def test_host_label_defaults_to_the_recordings_host(training: list[Snapshot]) -> None:
    collector = SnapshotCollector(None, placements=PlacementCache(enabled=False))
    collector.on_snapshot(training[0])
    labels, _ = only(exposition(collector)["gpumon_gpu_utilization_ratio"])
    assert labels["host"] == training[0].hostname != ""


def test_energy_integrates_power_and_skips_long_gaps() -> None:
    def at(seconds: float, watts: float) -> Snapshot:
        return Snapshot(timestamp=seconds, gpus=(GpuSample(index=0, uuid="GPU-a", name="g", power=watts),))

    meter = EnergyMeter(max_gap=30.0)
    for snapshot in (at(100.0, 100.0), at(101.0, 300.0), at(103.0, 300.0), at(200.0, 50.0), at(202.0, 50.0)):
        meter.add(snapshot)
    assert meter.joules["GPU-a"] == pytest.approx(200.0 + 600.0 + 100.0)


def test_energy_over_a_real_recording(training: list[Snapshot]) -> None:
    collector = replaying()
    for snapshot in training:
        collector.on_snapshot(snapshot)
    joules = only(exposition(collector)["gpumon_gpu_energy_joules_total"])[1]
    powers = [s.gpus[0].power for s in training]
    assert all(power is not None for power in powers)
    duration = training[-1].timestamp - training[0].timestamp
    low, high = min(powers) * duration, max(powers) * duration  # type: ignore[type-var]  # all checked not None
    assert low <= joules <= high


def test_health_fields_and_xid_errors_counted_once() -> None:
    health = GpuSample(
        index=1,
        uuid="GPU-h",
        name="H100",
        clock_sm_max=1980,
        fan_speed=40.0,
        pcie_link_gen=4,
        pcie_link_width=8,
        pcie_link_gen_max=5,
        pcie_link_width_max=16,
        energy_total=123456.0,
        nvlink_rx=2e9,
        nvlink_tx=1e9,
        ecc_corrected_volatile=3,
        ecc_uncorrected_volatile=0,
        ecc_corrected_aggregate=10,
        ecc_uncorrected_aggregate=1,
        remapped_rows_correctable=2,
        remapped_rows_uncorrectable=0,
        remapped_rows_pending=True,
        remapped_rows_failed=False,
        mig_mode=True,
        mig_instances=(MigSample(index=0, uuid="MIG-\x1b", name="H100 MIG 1g.10gb", memory_used=5),),
        xid_events=(XidEvent(timestamp=100.0, xid=13),),
    )
    collector = replaying()
    collector.on_snapshot(Snapshot(timestamp=101.0, gpus=(health,)))
    found = exposition(collector)
    assert only(found["gpumon_gpu_clock_sm_max_hertz"])[1] == 1980e6
    assert only(found["gpumon_gpu_fan_speed_ratio"])[1] == pytest.approx(0.4)
    assert only(found["gpumon_gpu_pcie_link_generation"])[1] == 4.0
    assert only(found["gpumon_gpu_pcie_link_width"])[1] == 8.0
    assert only(found["gpumon_gpu_pcie_link_generation_max"])[1] == 5.0
    assert only(found["gpumon_gpu_pcie_link_width_max"])[1] == 16.0
    assert only(found["gpumon_gpu_nvlink_rx_bytes_per_second"])[1] == 2e9
    assert only(found["gpumon_gpu_remapped_rows_pending"])[1] == 1.0
    assert only(found["gpumon_gpu_remapped_rows_failed"])[1] == 0.0
    assert only(found["gpumon_gpu_mig_mode"])[1] == 1.0
    energy_labels, joules = only(found["gpumon_gpu_energy_joules_total"])
    assert (energy_labels["source"], joules) == ("driver", 123456.0)
    ecc = {(labels["kind"], labels["scope"]): value for labels, value in found["gpumon_gpu_ecc_errors_total"]}
    assert ecc == {
        ("corrected", "volatile"): 3,
        ("uncorrected", "volatile"): 0,
        ("corrected", "aggregate"): 10,
        ("uncorrected", "aggregate"): 1,
    }
    rows = {labels["cause"]: value for labels, value in found["gpumon_gpu_remapped_rows"]}
    assert rows == {"correctable": 2, "uncorrectable": 0}
    mig, used = only(found["gpumon_gpu_mig_memory_used_bytes"])
    assert (mig["mig"], mig["mig_uuid"], mig["profile"], used) == ("0", "MIG-\\x1b", "H100 MIG 1g.10gb", 5)
    assert only(found["gpumon_gpu_xid_errors_total"])[1] == 1
    assert only(found["gpumon_gpu_last_xid"])[1] == 13
    # the same event again in the next snapshot's window counts once; a new one counts
    later = replace(health, xid_events=(XidEvent(timestamp=100.0, xid=13), XidEvent(timestamp=105.0, xid=79)))
    collector.on_snapshot(Snapshot(timestamp=102.0, gpus=(health,)))
    collector.on_snapshot(Snapshot(timestamp=106.0, gpus=(later,)))
    found = exposition(collector)
    assert only(found["gpumon_gpu_xid_errors_total"])[1] == 2
    assert only(found["gpumon_gpu_last_xid"])[1] == 79
