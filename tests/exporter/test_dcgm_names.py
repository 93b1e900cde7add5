"""`gpumon exporter --dcgm-names`: dcgm-exporter's names, units and labels, converted exactly from the sample, and the
public DCGM Grafana dashboard's own queries answered by a real Prometheus scraping a replayed real recording."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest
from exporter_helpers import RECORDINGS, only, running_exporter, samples, wait_until
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from prometheus_helpers import NO_BINARY, STARTUP_TIMEOUT, api, prometheus_binary, running_prometheus

from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.dcgm import DCGM_FIELDS, DCGM_LABELS, throttle_mask
from gpumon.exporter.labels import PlacementCache
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import GpuSample, Snapshot, XidEvent

RECORDING = RECORDINGS / "h200x2-dcgm-fields.jsonl.gz"
"""2x H200, 2026-11-27, recorded with every field --dcgm-names serves (FB free and GR_ENGINE_ACTIVE included)."""
DASHBOARD_QUERIES = Path(__file__).parent / "fixtures" / "dcgm-exporter-dashboard-queries.json"
OLDER_RECORDING = RECORDINGS / "h200x2-tests.jsonl"
NOT_IN_OLDER_RECORDING = {
    "DCGM_FI_DEV_FB_FREE": "memory_free: sampled since --dcgm-names, after the recording was made",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "graphics_activity (GPM GRAPHICS_UTIL): likewise",
}
"""DCGM fields the older recording lacks: no series, so no data (never a made-up 0)."""
MIB = 1 << 20


def exposition(snapshot: Snapshot, dcgm_names: bool = True) -> dict[str, list[tuple[dict[str, str], float]]]:
    collector = SnapshotCollector("node-a", placements=PlacementCache(enabled=False), dcgm_names=dcgm_names)
    collector.on_snapshot(snapshot)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return samples(generate_latest(registry).decode())


def test_dcgm_units_and_labels_from_a_real_recording() -> None:
    snapshot = read_recording(RECORDING)[-1]
    found = exposition(snapshot)
    assert len(snapshot.gpus) == 2
    for gpu in snapshot.gpus:

        def value(name: str, index: int = gpu.index) -> float:
            return only([row for row in found[name] if row[0]["gpu"] == str(index)])[1]

        labels = only([row for row in found["DCGM_FI_DEV_GPU_UTIL"] if row[0]["gpu"] == str(gpu.index)])[0]
        assert set(labels) == set(DCGM_LABELS)
        assert labels["UUID"] == gpu.uuid and labels["device"] == f"nvidia{gpu.index}"
        assert labels["modelName"] == gpu.name and labels["Hostname"] == "node-a"
        assert labels["DCGM_FI_DRIVER_VERSION"] == snapshot.driver_version
        assert gpu.utilization_gpu is not None and gpu.memory_used is not None and gpu.clock_sm is not None
        assert gpu.energy_total is not None and gpu.sm_activity is not None and gpu.tensor_activity is not None
        assert value("DCGM_FI_DEV_GPU_UTIL") == gpu.utilization_gpu  # percent, as DCGM
        assert value("DCGM_FI_DEV_FB_USED") == gpu.memory_used / MIB  # MiB
        assert value("DCGM_FI_DEV_SM_CLOCK") == gpu.clock_sm  # MHz
        assert value("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == pytest.approx(gpu.energy_total * 1000)  # mJ
        assert value("DCGM_FI_PROF_SM_ACTIVE") == pytest.approx(gpu.sm_activity / 100)  # ratio
        assert value("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") == pytest.approx(gpu.tensor_activity / 100)
        assert value("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") == throttle_mask(gpu.throttle_reasons)
    for field in DCGM_FIELDS:  # a series exactly where the recording has the field
        has = any(getattr(gpu, field.field) is not None for gpu in snapshot.gpus)
        assert (field.name in found) == has, field.name
    assert gpu.memory_free is not None and gpu.graphics_activity is not None
    assert value("DCGM_FI_DEV_FB_FREE") == gpu.memory_free / MIB
    assert value("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == pytest.approx(gpu.graphics_activity / 100)
    assert "DCGM_FI_DEV_XID_ERRORS" in found  # XID events were watched in this recording: the last code, 0 for none
    assert not any(name.startswith("DCGM_") for name in exposition(snapshot, dcgm_names=False))


def test_throttle_mask_is_nvmls_bitmask_and_xid_is_the_last_code() -> None:
    assert throttle_mask(None) is None
    assert throttle_mask(()) == 0
    assert throttle_mask(("sw_power_cap", "hw_thermal", "0x8000")) == 0x4 | 0x40 | 0x8000
    gpu = GpuSample(
        index=3,
        uuid="GPU-x",
        name="H100",
        memory_free=10 * MIB + MIB // 2,
        throttle_reasons=("hw_slowdown",),
        xid_events=(XidEvent(timestamp=1.0, xid=79), XidEvent(timestamp=2.0, xid=48)),
    )
    found = exposition(Snapshot(timestamp=3.0, gpus=(gpu,)))
    assert only(found["DCGM_FI_DEV_FB_FREE"])[1] == 10.5
    assert only(found["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"])[1] == 0x8
    assert only(found["DCGM_FI_DEV_XID_ERRORS"])[1] == 48
    assert "DCGM_FI_DEV_GPU_UTIL" not in found  # not sampled: no series


def test_public_dcgm_dashboard_queries_answer_from_a_replay(tmp_path: Path) -> None:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(NO_BINARY)
    dashboard = json.loads(DASHBOARD_QUERIES.read_text())
    last = read_recording(RECORDING)[-1]
    with ExitStack() as stack:
        exporter = stack.enter_context(
            running_exporter("--replay", str(RECORDING), "--speed", "32", "--host-label", "sim-node", "--dcgm-names")
        )
        base = stack.enter_context(running_prometheus(binary, tmp_path, [exporter.url]))

        def replay_done() -> bool:
            result = api(base, "/api/v1/query", query="gpumon_snapshot_timestamp_seconds")["result"]
            return bool(result) and float(result[0]["value"][1]) == last.timestamp

        wait_until(replay_done, STARTUP_TIMEOUT, "the recording's last snapshot in Prometheus", interval=0.25)

        def label_values(query: str) -> list[str]:
            """Grafana's label_values(SELECTOR, LABEL), through the same API call Grafana makes."""
            selector, label = query.removeprefix("label_values(").removesuffix(")").rsplit(",", 1)
            selector = selector.replace("$Hostname", "sim-node")
            return list(api(base, f"/api/v1/label/{label.strip()}/values", **{"match[]": selector}))

        for name, query in dashboard["variables"].items():
            assert label_values(query) == (["sim-node"] if name == "Hostname" else ["0", "1"])
        for panel in dashboard["panels"]:  # every panel, GPU Utilization (GR_ENGINE_ACTIVE) included
            expr = panel["expr"].replace("$Hostname", "sim-node").replace("$gpu", "0|1")
            result = api(base, "/api/v1/query", query=expr)["result"]
            assert result, f"{panel['title']}: {expr} returned no data"

        def by_gpu(expr: str) -> dict[str, float]:
            result = api(base, "/api/v1/query", query=expr)["result"]
            return {item["metric"]["gpu"]: float(item["value"][1]) for item in result}

        fb_used = by_gpu(dashboard["panels"][7]["expr"].replace("$Hostname", ".*").replace("$gpu", ".*"))
        assert fb_used == {str(gpu.index): (gpu.memory_used or 0) / MIB for gpu in last.gpus}
        clocks = by_gpu(dashboard["panels"][4]["expr"].replace("$Hostname", ".*").replace("$gpu", ".*"))
        assert clocks == {str(gpu.index): (gpu.clock_sm or 0) * 1e6 for gpu in last.gpus}


def test_fields_a_recording_lacks_have_no_series() -> None:
    snapshot = read_recording(OLDER_RECORDING)[-1]
    assert all(gpu.memory_free is None and gpu.graphics_activity is None for gpu in snapshot.gpus)
    found = exposition(snapshot)
    for name in NOT_IN_OLDER_RECORDING:
        assert name not in found, name
    assert "DCGM_FI_DEV_FB_USED" in found


REAL_SCRAPE = Path(__file__).parent / "fixtures" / "dcgm-names-scrape-h200x2-2026-11-27.txt"
"""`gpumon exporter --dcgm-names --interval 1 --no-jobs` scraped on 2x H200 (nvidia-h200-x2), 2026-11-27, 75 s into
a 2-rank NCCL job with hand-made all-reduces (benchmarks/gpu_session.sh x2open)."""


def test_every_dcgm_field_read_from_real_gpus() -> None:
    found = samples(REAL_SCRAPE.read_text())  # prometheus_client's own parser: the exposition is valid
    for field in DCGM_FIELDS:
        rows = found.get(field.name, [])
        assert sorted(labels["gpu"] for labels, _ in rows) == ["0", "1"], field.name
        assert all(set(labels) == set(DCGM_LABELS) and labels["modelName"] == "NVIDIA H200" for labels, _ in rows)
    for gpu in ("0", "1"):

        def value(name: str, index: str = gpu) -> float:
            return only([row for row in found[name] if row[0]["gpu"] == index])[1]

        assert value("DCGM_FI_DEV_GPU_UTIL") == 100.0  # both ranks busy in the NCCL job
        assert 0.9 < value("DCGM_FI_PROF_GR_ENGINE_ACTIVE") <= 1.0
        assert 0.0 < value("DCGM_FI_PROF_SM_ACTIVE") <= 1.0
        total_mib = value("DCGM_FI_DEV_FB_USED") + value("DCGM_FI_DEV_FB_FREE")
        assert 139_000 < total_mib < 144_000  # an H200's 141 GiB, less what the driver reserves
        assert value("DCGM_FI_PROF_NVLINK_TX_BYTES") > 1e9  # the all-reduces crossed NVLink
