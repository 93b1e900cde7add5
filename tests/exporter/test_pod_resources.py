"""Pod labels from the kubelet's pod-resources API, read from a real gRPC server on a unix socket; the cgroup
fallback (container ids named by /var/log/containers links) when the kubelet does not answer."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from exporter_helpers import running_exporter, samples, scrape, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st
from pod_resources_helpers import Container, Pod, encode_list_response, kubelet_serving, length_delimited, varint
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.labels import Placement, PlacementCache
from gpumon.exporter.pod_resources import (
    ERROR,
    NO_GRPCIO,
    NO_SOCKET,
    OK,
    Owner,
    PodResourcesError,
    PodResourcesWatcher,
    decode_list_response,
    gpu_device_owners,
)
from gpumon.exporter.pods import ContainerNames, PodAttribution
from gpumon.sampling.snapshot import GpuSample, MigSample, ProcessSample, Snapshot

CONTAINER_ID = "ab" * 32
POD_UID = "0f4b8c9e-1234-4c5d-8e9f-0123456789ab"
NODE_PODS = [
    Pod(
        "trainer-0",
        "ml",
        [
            Container("train", {"nvidia.com/gpu": ["GPU-a"]}, cpu_ids=[2, 3], memory_bytes=1 << 30),
            Container("sidecar", {"example.com/fpga": ["fpga-0"]}),
        ],
    ),
    Pod("notebook-1", "alice", [Container("lab", {"nvidia.com/gpu.shared": ["GPU-b::0"]})]),
    Pod("notebook-2", "bob", [Container("lab", {"nvidia.com/gpu.shared": ["GPU-b::1"]})]),
    Pod("small-0", "ml", [Container("infer", {"nvidia.com/mig-1g.10gb": ["MIG-c1"]})]),
    Pod("old-mig", "legacy", [Container("job", {"nvidia.com/mig-1g.5gb": ["MIG-GPU-e/1/0"]})]),
    Pod("web", "default", [Container("nginx")]),
]


def _snapshot() -> Snapshot:
    gpus = (
        GpuSample(index=0, uuid="GPU-a", name="H100", utilization_gpu=90.0),
        GpuSample(index=1, uuid="GPU-b", name="H100", utilization_gpu=40.0),
        GpuSample(
            index=2,
            uuid="GPU-c",
            name="H100",
            utilization_gpu=10.0,
            mig_instances=(MigSample(index=0, uuid="MIG-c1", memory_used=1), MigSample(index=1, uuid="MIG-c2")),
        ),
        GpuSample(index=3, uuid="GPU-d", name="H100", utilization_gpu=0.0),
        GpuSample(index=4, uuid="GPU-e", name="A100", utilization_gpu=5.0),
    )
    process = ProcessSample(pid=4242, command="python train.py", gpu_indices=(0,), gpu_memory=1)
    return Snapshot(timestamp=1.0, gpus=gpus, processes=(process,))


def _scrape(collector: SnapshotCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return samples(generate_latest(registry).decode())


def _fake_proc(root: Path, pid: int, cgroup: str, environ: bytes = b"") -> str:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)
    (root / str(pid) / "environ").write_bytes(environ)
    return str(root)


POD_CGROUP = f"0::/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-{CONTAINER_ID}.scope\n"


def test_decoder_reads_pods_containers_and_devices_and_skips_the_rest() -> None:
    allocations = decode_list_response(encode_list_response(NODE_PODS))
    found = {(a.owner, a.resource, a.device_ids) for a in allocations}
    assert (Owner("ml", "trainer-0", "train"), "nvidia.com/gpu", ("GPU-a",)) in found
    assert (Owner("ml", "trainer-0", "sidecar"), "example.com/fpga", ("fpga-0",)) in found
    assert len(allocations) == 6  # nginx has no devices
    owners = gpu_device_owners(allocations)
    assert owners == {
        "GPU-a": {Owner("ml", "trainer-0", "train")},
        "GPU-b": {Owner("alice", "notebook-1", "lab"), Owner("bob", "notebook-2", "lab")},
        "MIG-c1": {Owner("ml", "small-0", "infer")},
        "GPU-e": {Owner("legacy", "old-mig", "job")},
    }


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # a length past the end
        b"\x0a\x80",  # a varint cut short
        b"\x0b",  # wire type 3 (a group)
        length_delimited(1, b"\x08\x01"),  # a number where the pod's name belongs
        length_delimited(1, b"\x1d\x00"),  # a fixed32 cut short
        varint(1 << 3) + b"\xff" * 11,  # a varint over 10 bytes
    ],
)
def test_malformed_answers_are_one_error(data: bytes) -> None:
    with pytest.raises(PodResourcesError, match="malformed protobuf"):
        decode_list_response(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_pod_resources_error(data: bytes) -> None:
    try:
        decode_list_response(data)
    except PodResourcesError:
        pass


def test_gpu_and_process_series_carry_the_pods_the_kubelet_names(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, 4242, POD_CGROUP)
    with kubelet_serving(encode_list_response(NODE_PODS)) as kubelet:
        watcher = PodResourcesWatcher(kubelet.socket)
        watcher.refresh()
        assert (watcher.state, kubelet.calls) == (OK, 1)
        collector = SnapshotCollector("node-1", placements=PlacementCache(proc=proc), pods=PodAttribution(watcher))
        collector.on_snapshot(_snapshot())
        found = _scrape(collector)
    by_gpu = {labels["gpu"]: labels for labels, _ in found["gpumon_gpu_utilization_ratio"]}
    pods = {gpu: (labels["namespace"], labels["pod"], labels["container"]) for gpu, labels in by_gpu.items()}
    assert pods == {
        "0": ("ml", "trainer-0", "train"),
        "1": ("alice,bob", "notebook-1,notebook-2", "lab"),  # time-sliced: both pods, one series
        "2": ("ml", "small-0", "infer"),  # through its MIG instance
        "3": ("", "", ""),  # held by no pod
        "4": ("legacy", "old-mig", "job"),  # a MIG device named the old way
    }
    for name in ("gpumon_gpu_utilization_ratio", "gpumon_gpu_info", "gpumon_gpu_mig_memory_used_bytes"):
        label_sets = {frozenset(labels) for labels, _ in found[name]}
        assert len(label_sets) == 1 and {"namespace", "pod", "container"} <= next(iter(label_sets)), name
    ((process, _),) = found["gpumon_process_gpu_memory_bytes"]
    assert (process["namespace"], process["pod"], process["container"]) == ("ml", "trainer-0", "train")
    assert (process["pod_uid"], process["container_id"]) == (POD_UID, CONTAINER_ID)
    ((info, _),) = found["gpumon_exporter_info"]
    assert info["pod_resources"] == OK


def test_a_process_outside_any_pod_is_not_given_its_gpus_pod(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, 4242, "0::/system.slice/docker-" + CONTAINER_ID + ".scope\n")
    with kubelet_serving(encode_list_response(NODE_PODS)) as kubelet:
        watcher = PodResourcesWatcher(kubelet.socket)
        watcher.refresh()
        collector = SnapshotCollector("n", placements=PlacementCache(proc=proc), pods=PodAttribution(watcher))
        collector.on_snapshot(_snapshot())
        ((process, _),) = _scrape(collector)["gpumon_process_gpu_memory_bytes"]
    assert (process["pod"], process["container"], process["container_id"]) == ("", "", CONTAINER_ID)


def test_process_of_another_pod_on_the_gpu_keeps_its_own_pod() -> None:
    attribution = PodAttribution(PodResourcesWatcher("/nonexistent"))
    assert attribution.watcher is not None
    attribution.watcher.publish(OK, {"GPU-a": frozenset({Owner("ml", "trainer-0", "train")})})
    gpu = GpuSample(index=0, uuid="GPU-a", name="H100")
    debugging = Placement(pod_uid=POD_UID, pod="debug", namespace="ops")
    assert attribution.process_placement(debugging, [gpu]) == debugging
    same_pod = Placement(pod_uid=POD_UID, pod="trainer-0")
    assert attribution.process_placement(same_pod, [gpu]).container == "train"


def test_a_hung_kubelet_costs_one_timeout_and_drops_stale_owners() -> None:
    with kubelet_serving(encode_list_response(NODE_PODS)) as kubelet:
        watcher = PodResourcesWatcher(kubelet.socket, timeout=0.5)
        watcher.refresh()
        assert watcher.owners
        kubelet.hold.clear()
        started = time.monotonic()
        watcher.refresh()
        elapsed = time.monotonic() - started
    assert watcher.state == ERROR and not watcher.owners and not watcher.answering
    assert elapsed < 10, elapsed  # bounded by the call's deadline, not by the kubelet


def test_garbage_from_the_kubelet_is_an_error_state() -> None:
    with kubelet_serving(b"\x0a\xff\xff\xff\x0f") as kubelet:
        watcher = PodResourcesWatcher(kubelet.socket)
        watcher.refresh()
    assert watcher.state == ERROR and watcher.owners == {}


def test_without_the_socket_or_grpcio_pods_come_from_cgroups(tmp_path: Path) -> None:
    logs = tmp_path / "containers"
    logs.mkdir()
    (logs / f"trainer-0_ml_train-{CONTAINER_ID}.log").symlink_to("/nonexistent/0.log")  # names only are read
    (logs / "not-a-kubelet-link.log").touch()
    proc = _fake_proc(tmp_path / "proc", 4242, POD_CGROUP, b"POD_NAME=spoofed\0")
    names = ContainerNames(str(logs))
    for watcher in (PodResourcesWatcher(str(tmp_path / "absent.sock")), PodResourcesWatcher(grpc=None)):
        if watcher.state != NO_GRPCIO:
            watcher.refresh()
        collector = SnapshotCollector(
            "n", placements=PlacementCache(proc=proc, complete=names.fill), pods=PodAttribution(watcher)
        )
        collector.on_snapshot(_snapshot())
        found = _scrape(collector)
        by_gpu = {labels["gpu"]: labels for labels, _ in found["gpumon_gpu_utilization_ratio"]}
        assert (by_gpu["0"]["pod"], by_gpu["0"]["container"]) == ("trainer-0", "train")
        assert by_gpu["1"]["pod"] == ""
        ((process, _),) = found["gpumon_process_gpu_memory_bytes"]
        assert (process["namespace"], process["pod"], process["container"]) == ("ml", "trainer-0", "train")
        ((info, _),) = found["gpumon_exporter_info"]
        assert info["pod_resources"] in (NO_SOCKET, NO_GRPCIO)


def test_container_names_rescan_at_most_every_interval(tmp_path: Path) -> None:
    now = [0.0]
    names = ContainerNames(str(tmp_path), rescan_interval=10.0, clock=lambda: now[0])
    assert names.of(CONTAINER_ID) is None
    (tmp_path / f"p_ns_c-{CONTAINER_ID}.log").touch()
    now[0] = 5.0
    assert names.of(CONTAINER_ID) is None  # a new container waits for the next scan
    now[0] = 10.0
    assert names.of(CONTAINER_ID) == Owner("ns", "p", "c")
    assert names.fill(Placement()) == Placement()


def test_watcher_thread_refreshes_until_stopped() -> None:
    with kubelet_serving(encode_list_response(NODE_PODS)) as kubelet:
        watcher = PodResourcesWatcher(kubelet.socket, interval=0.05)
        watcher.start()
        try:
            wait_until(lambda: watcher.refreshes >= 3, 30, "three refreshes", interval=0.02)
            assert watcher.state == OK
        finally:
            watcher.stop()
        assert watcher._thread is not None and not watcher._thread.is_alive()


def test_exporter_command_reports_the_kubelet_state() -> None:
    with kubelet_serving(encode_list_response(NODE_PODS)) as kubelet:
        with running_exporter("--no-jobs", "--pod-resources-socket", kubelet.socket) as exporter:

            def kubelet_read() -> bool:
                ((info, _),) = samples(scrape(exporter.url))["gpumon_exporter_info"]
                return info["pod_resources"] == OK

            wait_until(kubelet_read, 30, "the exporter's pod_resources state ok")
            assert kubelet.calls >= 1
        with running_exporter("--no-jobs", "--pod-resources-socket", "") as exporter:
            ((info, _),) = samples(scrape(exporter.url))["gpumon_exporter_info"]
            assert info["pod_resources"] == "off"
