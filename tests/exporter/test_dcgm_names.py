"""`gpumon exporter --dcgm-names`: dcgm-exporter's names, units and labels, converted exactly from the sample, held
against dcgm-exporter's default counters, and the public DCGM Grafana dashboard's own queries answered by a real
Prometheus scraping a replayed real recording."""

from __future__ import annotations

import dataclasses
import json
import re
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml as real
import pytest
from exporter_helpers import RECORDINGS, only, running_exporter, samples, wait_until
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry
from prometheus_helpers import NO_BINARY, STARTUP_TIMEOUT, api, prometheus_binary, running_prometheus

from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.dcgm import DCGM_FIELDS, DCGM_LABELS, POD_LABELS, dcgm_families, throttle_mask
from gpumon.exporter.labels import PlacementCache
from gpumon.sampling.nvml import GpuCollector
from gpumon.sampling.recording import read_recording
from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import GpuSample, Snapshot, XidEvent
from tests.sampling.fake_nvml import FakeClock, FakeDevice, FakeNvml, nvml_error

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


DEFAULT_COUNTERS = Path(__file__).parent / "fixtures" / "dcgm-default-counters.csv"
NOT_FROM_NVML = {
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "DCGM's running KB totals; NVML gives rates: DCGM_FI_PROF_PCIE_TX_BYTES instead",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "likewise: DCGM_FI_PROF_PCIE_RX_BYTES instead",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU guests only; gpumon does not read vGPU licensing",
}
"""dcgm-exporter's default counters gpumon does not serve, and why (docs/deploy/README.md lists them too)."""
_SAMPLE_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')

Found = dict[str, list[tuple[dict[str, str], float]]]


def as_written(text: str) -> tuple[Found, dict[str, str]]:
    """Samples by the name the exposition writes (prometheus_client's parser would add _total to a counter's), and
    each family's TYPE."""
    found: Found = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            match = _SAMPLE_LINE.match(line)
            assert match is not None, line
            labels = dict(_LABEL.findall(match.group(2) or ""))
            found.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return found, types


def exposition(snapshot: Snapshot, dcgm_names: bool = True, openmetrics: bool = False) -> tuple[Found, dict[str, str]]:
    collector = SnapshotCollector("node-a", placements=PlacementCache(enabled=False), dcgm_names=dcgm_names)
    collector.on_snapshot(snapshot)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = (generate_openmetrics(registry) if openmetrics else generate_latest(registry)).decode()
    samples(text)  # prometheus_client's own parser takes it: the exposition is valid
    return as_written(text)


def served(snapshot: Snapshot, dcgm_names: bool = True) -> Found:
    return exposition(snapshot, dcgm_names)[0]


def test_dcgm_units_and_labels_from_a_real_recording() -> None:
    snapshot = read_recording(RECORDING)[-1]
    found = served(snapshot)
    assert len(snapshot.gpus) == 2
    for gpu in snapshot.gpus:

        def value(name: str, index: int = gpu.index) -> float:
            return only([row for row in found[name] if row[0]["gpu"] == str(index)])[1]

        labels = only([row for row in found["DCGM_FI_DEV_GPU_UTIL"] if row[0]["gpu"] == str(gpu.index)])[0]
        assert set(labels) == set(DCGM_LABELS)
        assert labels["UUID"] == gpu.uuid and labels["device"] == f"nvidia{gpu.index}"
        assert labels["modelName"] == gpu.name and labels["Hostname"] == "node-a"
        assert labels["pci_bus_id"] == ""  # the recording predates it: empty, as Prometheus reads an absent label
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
        has = any(field.value(gpu) is not None for gpu in snapshot.gpus)
        assert (field.name in found) == has, field.name
    assert gpu.memory_free is not None and gpu.graphics_activity is not None
    assert value("DCGM_FI_DEV_FB_FREE") == gpu.memory_free / MIB
    assert value("DCGM_FI_PROF_GR_ENGINE_ACTIVE") == pytest.approx(gpu.graphics_activity / 100)
    assert "DCGM_FI_DEV_XID_ERRORS" in found  # XID events were watched in this recording: the last code, 0 for none
    assert not any(name.startswith("DCGM_") for name in served(snapshot, dcgm_names=False))


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
    found = served(Snapshot(timestamp=3.0, gpus=(gpu,)))
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
        energy = api(base, "/api/v1/metadata", metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        assert energy["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0]["type"] == "counter"  # DCGM's name, typed counter
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
    found = served(snapshot)
    for name in NOT_IN_OLDER_RECORDING:
        assert name not in found, name
    assert "DCGM_FI_DEV_FB_USED" in found


REAL_SCRAPE = Path(__file__).parent / "fixtures" / "dcgm-names-scrape-h200x2-2026-11-27.txt"
"""`gpumon exporter --dcgm-names --interval 1 --no-jobs` scraped on 2x H200 (nvidia-h200-x2), 2026-11-27, 75 s into
a 2-rank NCCL job with hand-made all-reduces (benchmarks/gpu_session.sh x2open)."""
SERVED_SINCE_THE_SCRAPE = {
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
}
"""Fields (and the pci_bus_id label) added after the real scrape: held against the fake NVML only
(test_default_counters_served_from_an_nvml_that_answers_everything); no GPU time was left to scrape them again."""


def test_every_dcgm_field_read_from_real_gpus() -> None:
    found = samples(REAL_SCRAPE.read_text())  # prometheus_client's own parser: the exposition is valid
    labels_then = set(DCGM_LABELS) - {"pci_bus_id"}
    for field in DCGM_FIELDS:
        if field.name in SERVED_SINCE_THE_SCRAPE:
            continue
        rows = found.get(field.name, [])
        assert sorted(labels["gpu"] for labels, _ in rows) == ["0", "1"], field.name
        assert all(set(labels) == labels_then and labels["modelName"] == "NVIDIA H200" for labels, _ in rows)
    for gpu in ("0", "1"):

        def value(name: str, index: str = gpu) -> float:
            return only([row for row in found[name] if row[0]["gpu"] == index])[1]

        assert value("DCGM_FI_DEV_GPU_UTIL") == 100.0  # both ranks busy in the NCCL job
        assert 0.9 < value("DCGM_FI_PROF_GR_ENGINE_ACTIVE") <= 1.0
        assert 0.0 < value("DCGM_FI_PROF_SM_ACTIVE") <= 1.0
        total_mib = value("DCGM_FI_DEV_FB_USED") + value("DCGM_FI_DEV_FB_FREE")
        assert 139_000 < total_mib < 144_000  # an H200's 141 GiB, less what the driver reserves
        assert value("DCGM_FI_PROF_NVLINK_TX_BYTES") > 1e9  # the all-reduces crossed NVLink


class EveryFieldNvml(FakeNvml):
    """The fake NVML answering the calls --dcgm-names needs beyond the dashboard's: PCI info, the v2 memory call's
    reserve, memory temperature and PCIe replays (field values), encoder and decoder utilization."""

    BUS_ID = "00000000:19:00.0"
    RESERVED = 512 * 1024**2

    def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> Any:
        self._enter("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=self.BUS_ID)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        memory = super().nvmlDeviceGetMemoryInfo(handle, version)
        return SimpleNamespace(**vars(memory), reserved=self.RESERVED) if version else memory

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeDevice) -> list[int]:
        self._enter("nvmlDeviceGetEncoderUtilization", handle)
        return [7, 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeDevice) -> list[int]:
        self._enter("nvmlDeviceGetDecoderUtilization", handle)
        return [3, 167_000]

    def nvmlDeviceGetFieldValues(self, handle: FakeDevice, field_ids: list[tuple[int, int]]) -> list[Any]:
        values = super().nvmlDeviceGetFieldValues(handle, field_ids)
        extra = {real.NVML_FI_DEV_MEMORY_TEMP: 52, real.NVML_FI_DEV_PCIE_REPLAY_COUNTER: 4}
        for value in values:
            if value.fieldId in extra:
                value.nvmlReturn, value.value = real.NVML_SUCCESS, SimpleNamespace(ullVal=extra[value.fieldId])
        return values


def fake_snapshot(nvml: FakeNvml, device: FakeDevice) -> Snapshot:
    """One snapshot of `nvml` through the live sampler, its NVLink counters moved in the 10 s between the health read
    that found them and the snapshot's fast read, XID events watched (none came)."""
    clock = FakeClock()
    collector = GpuCollector(nvml=nvml, clock=clock, graphics_activity=True)
    collector.collect_fast()
    collector.collect_slow()
    clock.advance(10.0)
    device.nvlink_kib.update({(real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0): 4000.0})
    device.nvlink_kib.update({(real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0): 1000.0})
    sampler = Sampler(gpu=collector)
    try:
        snapshot = sampler.sample_once(window=0.0)
    finally:
        sampler.stop()
    return dataclasses.replace(snapshot, gpus=tuple(dataclasses.replace(gpu, xid_events=()) for gpu in snapshot.gpus))


def nvlink_device() -> FakeDevice:
    links = {(real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0): 0.0, (real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0): 0.0}
    return FakeDevice(nvlink_kib=links)


def default_counters() -> dict[str, str]:
    """dcgm-exporter's default fields -> their Prometheus type, from the committed copy of its list."""
    rows = [line.split(",") for line in DEFAULT_COUNTERS.read_text().splitlines() if line and not line.startswith("#")]
    return {name.strip(): kind.strip() for name, kind, *_ in rows}


def test_default_counters_served_from_an_nvml_that_answers_everything() -> None:
    device = nvlink_device()
    snapshot = fake_snapshot(EveryFieldNvml([device]), device)
    found, types = exposition(snapshot)
    defaults = default_counters()
    assert len(defaults) == 21
    for name, kind in defaults.items():
        if name in NOT_FROM_NVML:
            assert name not in found, f"{name} is served: take it off the exceptions"
            continue
        assert name in found, f"{name}: in dcgm-exporter's defaults, not served"
        assert types[name] == kind, name  # the exact name, typed as dcgm-exporter types it
    (gpu,) = snapshot.gpus
    labels = only(found["DCGM_FI_DEV_GPU_TEMP"])[0]
    assert labels["pci_bus_id"] == EveryFieldNvml.BUS_ID and set(labels) == set(DCGM_LABELS)
    assert only(found["DCGM_FI_DEV_MEMORY_TEMP"])[1] == 52
    assert only(found["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"])[1] == 4
    assert only(found["DCGM_FI_DEV_ENC_UTIL"])[1] == 7 and only(found["DCGM_FI_DEV_DEC_UTIL"])[1] == 3
    assert only(found["DCGM_FI_DEV_FB_RESERVED"])[1] == 512
    # 4000 KiB in and 1000 out over the 10 s between two counter readings: 512,000 B/s, as MB/s
    assert only(found["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"])[1] == pytest.approx(5000 * 1024 / 10 / 1e6)
    assert gpu.memory_reserved == EveryFieldNvml.RESERVED and gpu.pci_bus_id == EveryFieldNvml.BUS_ID
    assert Snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))) == snapshot  # recorded and read back


def test_fields_nvml_does_not_give_are_absent_not_errors() -> None:
    """The plain fake NVML has no PCI info, encoder or decoder calls, and answers the memory temperature and PCIe
    replay fields with NOT_SUPPORTED: those series are absent, the rest served."""
    device = FakeDevice(unsupported={"nvmlDeviceGetPciInfo"})
    snapshot = fake_snapshot(FakeNvml([device]), device)
    (gpu,) = snapshot.gpus
    assert (gpu.pci_bus_id, gpu.memory_temperature, gpu.pcie_replays) == (None, None, None)
    assert (gpu.encoder_utilization, gpu.decoder_utilization, gpu.memory_reserved) == (None, None, None)
    found = served(snapshot)
    for name in ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ENC_UTIL"):
        assert name not in found, name
    assert only(found["DCGM_FI_DEV_GPU_TEMP"])[0]["pci_bus_id"] == ""


def test_a_failing_new_call_gives_none() -> None:
    """A call that fails (an NVML error or anything pynvml raises) leaves its field None; the GPU stays."""

    class Failing(EveryFieldNvml):
        def nvmlDeviceGetEncoderUtilization(self, handle: FakeDevice) -> list[int]:
            raise nvml_error("NVML_ERROR_NO_PERMISSION")

        def nvmlDeviceGetPciInfo(self, handle: FakeDevice) -> Any:
            raise RuntimeError("pynvml cannot decode the bus id")

    device = nvlink_device()
    (gpu,) = fake_snapshot(Failing([device]), device).gpus
    assert gpu.encoder_utilization is None and gpu.pci_bus_id is None
    assert gpu.decoder_utilization == 3 and gpu.memory_temperature == 52


def test_counters_keep_dcgms_names_in_both_expositions() -> None:
    gpu = GpuSample(index=0, uuid="GPU-x", name="H200", energy_total=12.5, remapped_rows_correctable=2, temperature=40)
    for openmetrics in (False, True):
        found, types = exposition(Snapshot(timestamp=1.0, gpus=(gpu,)), openmetrics=openmetrics)
        assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
        assert only(found["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])[1] == 12_500.0  # mJ, under DCGM's own name
        assert types["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == "counter"
        assert types["DCGM_FI_DEV_GPU_TEMP"] == "gauge"
        assert not any(name.startswith("DCGM_") and name.endswith("_total") for name in found)
        assert "gpumon_gpu_energy_joules_total" in found  # gpumon's own counters keep prometheus_client's _total


def test_pod_labels_only_on_the_gpus_a_pod_holds() -> None:
    gpus = tuple(GpuSample(index=index, uuid=f"GPU-{index}", name="H200", temperature=40.0) for index in (0, 1))
    pods = {"GPU-0": ("ml", "trainer-0", "main"), "GPU-1": ("", "", "")}
    (family,) = [
        family
        for family in dcgm_families(Snapshot(timestamp=1.0, gpus=gpus), "node-a", {}, pods)
        if family.name == "DCGM_FI_DEV_GPU_TEMP"
    ]
    by_gpu = {sample.labels["gpu"]: sample.labels for sample in family.samples}
    assert {key: by_gpu["0"][key] for key in POD_LABELS} == {"namespace": "ml", "pod": "trainer-0", "container": "main"}
    assert set(by_gpu["1"]) == set(DCGM_LABELS)  # no pod: no pod labels, as dcgm-exporter
