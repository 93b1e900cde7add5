"""A real gRPC server speaking the kubelet's `v1.PodResourcesLister/List` on a unix socket, and a small protobuf
encoder for its ListPodResourcesResponse (field numbers from kubelet's pkg/apis/podresources/v1/api.proto)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

grpc: Any = pytest.importorskip("grpc", reason="grpcio (the dev and k8s extras) serves the test's kubelet")


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def length_delimited(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def text(number: int, value: str) -> bytes:
    return length_delimited(number, value.encode())


def varint_field(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


@dataclass
class Container:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)
    """resource name -> device ids"""
    cpu_ids: list[int] = field(default_factory=list)
    memory_bytes: int | None = None


@dataclass
class Pod:
    name: str
    namespace: str
    containers: list[Container]


def encode_container(container: Container) -> bytes:
    out = text(1, container.name)
    for resource, ids in container.devices.items():
        device = text(1, resource) + b"".join(text(2, device_id) for device_id in ids)
        device += length_delimited(3, length_delimited(1, varint_field(1, 0)))  # TopologyInfo{nodes: [NUMANode{ID: 0}]}
        out += length_delimited(2, device)
    if container.cpu_ids:  # repeated int64, packed
        out += length_delimited(3, b"".join(varint(cpu) for cpu in container.cpu_ids))
    if container.memory_bytes is not None:  # ContainerMemory{memory_type, size}
        out += length_delimited(4, text(1, "memory") + varint_field(2, container.memory_bytes))
    return out


def encode_list_response(pods: list[Pod]) -> bytes:
    """A ListPodResourcesResponse, with the fields a decoder must skip (cpu ids, memory, topology) set too."""
    out = b""
    for pod in pods:
        body = text(1, pod.name) + text(2, pod.namespace)
        body += b"".join(length_delimited(3, encode_container(container)) for container in pod.containers)
        out += length_delimited(1, body)
    return out


@dataclass
class Kubelet:
    """The test's kubelet: `answer` is what List returns; while `hold` is clear, List waits (a hung kubelet)."""

    socket: str
    answer: bytes
    calls: int = 0
    hold: threading.Event = field(default_factory=threading.Event)


@contextmanager
def kubelet_serving(answer: bytes) -> Iterator[Kubelet]:
    """A grpcio server on a unix socket in a short temporary directory (socket paths are limited to 107 bytes)."""
    directory = tempfile.mkdtemp(prefix="gpumon-kubelet-")
    kubelet = Kubelet(socket=str(Path(directory) / "kubelet.sock"), answer=answer)
    kubelet.hold.set()

    def list_pods(request: bytes, context: Any) -> bytes:
        assert request == b""
        kubelet.calls += 1
        kubelet.hold.wait(30)
        return kubelet.answer

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(list_pods)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{kubelet.socket}")
    server.start()
    try:
        yield kubelet
    finally:
        kubelet.hold.set()
        server.stop(grace=None).wait(10)
        shutil.rmtree(directory, ignore_errors=True)
