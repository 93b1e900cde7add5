"""Which pod holds which GPU: the kubelet's pod-resources API (gRPC `v1.PodResourcesLister/List` on its unix
socket, the one dcgm-exporter reads), through grpcio with raw bytes and a small protobuf decoder of the few fields
needed, refreshed on a thread so a scrape only reads the last answer."""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
CALL_TIMEOUT = 1.0
"""Seconds one List call may take (the kubelet answers from memory)."""
REFRESH_INTERVAL = 10.0
"""Seconds between List calls: a new pod's GPUs carry its name within this long."""
MAX_RESPONSE_BYTES = 16 << 20
"""The largest answer read (gRPC's own default is 4 MiB; a node with hundreds of pods stays well under)."""
GPU_RESOURCE_PREFIX = "nvidia.com/"
"""Resources of NVIDIA's device plugin: nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb, ..."""
SHARED_REPLICA = "::"
"""Time-slicing replicas are named <GPU uuid>::<n> by NVIDIA's device plugin."""

# The state shown in gpumon_exporter_info{pod_resources}.
OFF = "off"
NO_SOCKET = "no_socket"
NO_GRPCIO = "no_grpcio"
STARTING = "starting"
OK = "ok"
ERROR = "error"


class PodResourcesError(Exception):
    """The kubelet could not be asked, or its answer could not be read."""


@dataclass(frozen=True, slots=True, order=True)
class Owner:
    """One container that was given a device."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class Allocation:
    """Devices of one resource given to one container."""

    owner: Owner
    resource: str
    device_ids: tuple[str, ...]


# Protobuf wire format (https://protobuf.dev/programming-guides/encoding/): the decoder reads only the fields below.
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
LIST_POD_RESOURCES = 1  # ListPodResourcesResponse.pod_resources
POD_NAME, POD_NAMESPACE, POD_CONTAINERS = 1, 2, 3  # PodResources
CONTAINER_NAME, CONTAINER_DEVICES = 1, 2  # ContainerResources
DEVICE_RESOURCE_NAME, DEVICE_IDS = 1, 2  # ContainerDevices


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(at, min(at + 10, len(data))):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index + 1
        shift += 7
    raise PodResourcesError("malformed protobuf: a varint runs past its end")


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of one message: an int, or the bytes of a length-delimited field."""
    at = 0
    while at < len(data):
        tag, at = _varint(data, at)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == VARINT:
            value, at = _varint(data, at)
            yield number, wire_type, value
        elif wire_type == LENGTH_DELIMITED:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise PodResourcesError("malformed protobuf: a field runs past the message's end")
            yield number, wire_type, data[at : at + size]
            at += size
        elif wire_type in (FIXED64, FIXED32):
            at += 8 if wire_type == FIXED64 else 4
            if at > len(data):
                raise PodResourcesError("malformed protobuf: a fixed-size field runs past the message's end")
        else:
            raise PodResourcesError(f"malformed protobuf: wire type {wire_type}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise PodResourcesError("malformed protobuf: a number where a string belongs")
    return value.decode("utf-8", "replace")


def _message(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise PodResourcesError("malformed protobuf: a number where a message belongs")
    return value


def decode_list_response(data: bytes) -> list[Allocation]:
    """The device allocations of a ListPodResourcesResponse (pods -> containers -> devices)."""
    allocations: list[Allocation] = []
    for number, _, pod_value in fields(data):
        if number != LIST_POD_RESOURCES:
            continue
        name = namespace = ""
        containers: list[bytes] = []
        for pod_field, _, value in fields(_message(pod_value)):
            if pod_field == POD_NAME:
                name = _text(value)
            elif pod_field == POD_NAMESPACE:
                namespace = _text(value)
            elif pod_field == POD_CONTAINERS:
                containers.append(_message(value))
        for container in containers:
            allocations.extend(_container_allocations(namespace, name, container))
    return allocations


def _container_allocations(namespace: str, pod: str, data: bytes) -> Iterator[Allocation]:
    name = ""
    devices: list[bytes] = []
    for number, _, value in fields(data):
        if number == CONTAINER_NAME:
            name = _text(value)
        elif number == CONTAINER_DEVICES:
            devices.append(_message(value))
    owner = Owner(namespace, pod, name)
    for device in devices:
        resource = ""
        ids: list[str] = []
        for number, _, value in fields(device):
            if number == DEVICE_RESOURCE_NAME:
                resource = _text(value)
            elif number == DEVICE_IDS:
                ids.append(_text(value))
        yield Allocation(owner, resource, tuple(ids))


def gpu_device_owners(allocations: Iterable[Allocation]) -> dict[str, frozenset[Owner]]:
    """NVIDIA device id (GPU-<uuid> or MIG-<uuid>) -> the containers given it. Time-slicing replicas (<uuid>::<n>)
    count as their GPU, so a shared GPU has several owners; a MIG device named the pre-R470 way
    (MIG-GPU-<uuid>/<gi>/<ci>) counts as its GPU."""
    owners: dict[str, set[Owner]] = {}
    for allocation in allocations:
        if not allocation.resource.startswith(GPU_RESOURCE_PREFIX):
            continue
        for device_id in allocation.device_ids:
            device = device_id.split(SHARED_REPLICA)[0]
            owners.setdefault(legacy_mig_parent(device) or device, set()).add(allocation.owner)
    return {device: frozenset(found) for device, found in owners.items()}


def legacy_mig_parent(device_id: str) -> str | None:
    """The GPU uuid of a MIG device named the pre-R470 way, MIG-GPU-<uuid>/<gi>/<ci>."""
    if device_id.startswith("MIG-GPU-"):
        return device_id[len("MIG-") :].split("/")[0]
    return None


class _UnaryCall(Protocol):
    def __call__(self, request: bytes, timeout: float | None = None) -> bytes: ...


class _Channel(Protocol):
    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
    ) -> _UnaryCall: ...

    def close(self) -> None: ...


class _Grpc(Protocol):
    """The part of grpcio used here (grpcio has no type hints)."""

    RpcError: type[Exception]

    def insecure_channel(self, target: str, options: Any = None) -> _Channel: ...


def load_grpc() -> _Grpc | None:
    """grpcio, or None where it is not installed (the `k8s` extra)."""
    try:
        return cast(_Grpc, importlib.import_module("grpc"))
    except ImportError:
        return None


def list_pod_resources(grpc: _Grpc, socket_path: str, timeout: float = CALL_TIMEOUT) -> list[Allocation]:
    """One List call to the kubelet on `socket_path`, within `timeout` seconds."""
    channel = grpc.insecure_channel(
        f"unix:{os.path.abspath(socket_path)}",
        options=[("grpc.max_receive_message_length", MAX_RESPONSE_BYTES), ("grpc.enable_retries", 0)],
    )
    try:
        call = channel.unary_unary(LIST_METHOD)  # no (de)serializers: raw bytes both ways
        answer = call(b"", timeout=timeout)  # an empty ListPodResourcesRequest
    except grpc.RpcError as error:
        details = getattr(error, "details", None)
        raise PodResourcesError(str(details() if callable(details) else error)) from None
    finally:
        channel.close()
    return decode_list_response(answer)


class PodResourcesWatcher:
    """Asks the kubelet every `interval` seconds on its own thread; `owners` is the last good answer and `state`
    says whether there is one (both published as one tuple, so a scrape on another thread reads a consistent pair)."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        *,
        interval: float = REFRESH_INTERVAL,
        timeout: float = CALL_TIMEOUT,
        grpc: _Grpc | None = None,
    ) -> None:
        self.socket_path = socket_path
        self.interval = interval
        self.timeout = timeout
        self._grpc = grpc if grpc is not None else load_grpc()
        self._latest: tuple[str, Mapping[str, frozenset[Owner]]] = (
            STARTING if self._grpc is not None else NO_GRPCIO,
            {},
        )
        self.refreshes = 0
        """List answers read so far (tests wait on it)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> str:
        return self._latest[0]

    @property
    def owners(self) -> Mapping[str, frozenset[Owner]]:
        return self._latest[1]

    @property
    def answering(self) -> bool:
        """True while the kubelet answers: its owners are then the truth, even when empty."""
        return self.state == OK

    def publish(self, state: str, owners: Mapping[str, frozenset[Owner]]) -> None:
        """The new state and owners, together."""
        if state != self.state:
            log.debug("pod-resources: %s (%s)", state, self.socket_path)
        self._latest = (state, owners)

    def refresh(self) -> None:
        """One List call; on failure the owners are dropped (a stale pod must not keep a GPU's labels)."""
        if self._grpc is None:
            return
        if not os.path.exists(self.socket_path):
            self.publish(NO_SOCKET, {})
            return
        try:
            owners = gpu_device_owners(list_pod_resources(self._grpc, self.socket_path, self.timeout))
        except PodResourcesError as error:
            if self.state != ERROR:
                log.warning("pod-resources: %s: %s", self.socket_path, error)
            self.publish(ERROR, {})
            return
        self.publish(OK, owners)
        self.refreshes += 1

    def start(self) -> None:
        if self._grpc is None:
            log.debug("pod-resources: grpcio is not installed (the k8s extra); pod labels come from cgroups")
            return
        self._thread = threading.Thread(target=self._run, name="gpumon-pod-resources", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1.0)
