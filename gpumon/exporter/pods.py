"""Pod, namespace and container of each GPU and GPU process: from the kubelet's pod-resources API while it answers,
else from the processes' cgroups (their container id named by the kubelet's /var/log/containers links)."""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping

from gpumon.exporter.labels import Placement, PlacementCache, label_value
from gpumon.exporter.pod_resources import Owner, PodResourcesWatcher
from gpumon.sampling.snapshot import GpuSample, Snapshot

POD_LABELS = ("namespace", "pod", "container")
"""The labels every GPU series carries ('' where no pod holds the GPU)."""
NO_POD = ("", "", "")
CONTAINER_LOG_DIR = "/var/log/containers"
"""The kubelet links each container's log here as <pod>_<namespace>_<container>-<container id>.log."""
MAX_LOG_LINKS = 20_000
"""Links read per scan: far more containers than a node runs, bounded for a hostile directory."""
RESCAN_INTERVAL = 10.0
"""Seconds before an unknown container id may cause another scan of the directory."""

_LOG_LINK = re.compile(r"^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$")


def pod_label_values(owners: Iterable[Owner]) -> tuple[str, str, str]:
    """(namespace, pod, container) of the containers holding one GPU; several (a shared GPU, MIG instances of
    different pods) are listed sorted, comma-separated, so each GPU keeps one series."""
    found = sorted(set(owners))
    return (
        label_value(",".join(sorted({owner.namespace for owner in found}))),
        label_value(",".join(sorted({owner.pod for owner in found}))),
        label_value(",".join(sorted({owner.container for owner in found}))),
    )


class ContainerNames:
    """Container id -> the Owner the kubelet's log links name; rescanned when an id is unknown, at most every
    `rescan_interval` seconds. Names only are read: the links' targets are not followed."""

    def __init__(
        self,
        directory: str = CONTAINER_LOG_DIR,
        *,
        rescan_interval: float = RESCAN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = directory
        self.rescan_interval = rescan_interval
        self._clock = clock
        self._known: dict[str, Owner] = {}
        self._scanned_at: float | None = None

    def of(self, container_id: str) -> Owner | None:
        owner = self._known.get(container_id)
        now = self._clock()
        if owner is None and (self._scanned_at is None or now - self._scanned_at >= self.rescan_interval):
            self._scanned_at = now
            self._known = self._scan()
            owner = self._known.get(container_id)
        return owner

    def _scan(self) -> dict[str, Owner]:
        known: dict[str, Owner] = {}
        try:
            with os.scandir(self.directory) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_LOG_LINKS:
                        break
                    match = _LOG_LINK.match(entry.name)
                    if match is not None:
                        pod, namespace, container, container_id = match.groups()
                        known[container_id] = Owner(namespace, pod, container)
        except OSError:  # not on Kubernetes, or the directory is not mounted: cgroup ids only
            pass
        return known

    def fill(self, placement: Placement) -> Placement:
        """`placement` with the kubelet's names for its container (they win over POD_NAME-style variables, which
        any process may set)."""
        owner = self.of(placement.container_id) if placement.container_id else None
        if owner is None:
            return placement
        return dataclasses.replace(
            placement,
            namespace=label_value(owner.namespace),
            pod=label_value(owner.pod),
            container=label_value(owner.container),
        )


class PodAttribution:
    """Pod labels for GPU and process series, built at scrape time from what is already in memory."""

    def __init__(self, watcher: PodResourcesWatcher | None = None) -> None:
        self.watcher = watcher

    @property
    def source(self) -> str:
        """Where GPUs' pods come from now: the watcher's state ('ok' when the kubelet answers), or 'off'."""
        return self.watcher.state if self.watcher is not None else "off"

    def _device_owners(self) -> Mapping[str, frozenset[Owner]] | None:
        watcher = self.watcher
        return watcher.owners if watcher is not None and watcher.answering else None

    def gpu_labels(self, snapshot: Snapshot, placements: PlacementCache) -> dict[str, tuple[str, str, str]]:
        """GPU uuid -> (namespace, pod, container): the containers the kubelet gave it (or its MIG instances);
        without the kubelet, those of the processes running on it."""
        devices = self._device_owners()
        if devices is not None:
            return {gpu.uuid: pod_label_values(_owners_of(gpu, devices)) for gpu in snapshot.gpus}
        by_index: dict[int, set[Owner]] = {}
        for process in snapshot.processes:
            placement = placements.of(process.pid)
            if placement.pod:
                for index in process.gpu_indices:
                    by_index.setdefault(index, set()).add(
                        Owner(placement.namespace, placement.pod, placement.container)
                    )
        return {gpu.uuid: pod_label_values(by_index.get(gpu.index, ())) for gpu in snapshot.gpus}

    def process_placement(self, placement: Placement, gpus: Iterable[GpuSample]) -> Placement:
        """`placement` completed from the containers holding the process's GPUs, when its cgroup puts it in a pod
        and exactly one such container can be it (of the same pod, where the pod is already known)."""
        devices = self._device_owners()
        if devices is None or not placement.pod_uid or (placement.pod and placement.container):
            return placement
        candidates = {
            owner
            for gpu in gpus
            for owner in _owners_of(gpu, devices)
            if not placement.pod or (owner.pod == placement.pod and placement.namespace in ("", owner.namespace))
        }
        if len(candidates) != 1:
            return placement
        (owner,) = candidates
        return dataclasses.replace(
            placement,
            namespace=label_value(owner.namespace),
            pod=label_value(owner.pod),
            container=label_value(owner.container),
        )


def _owners_of(gpu: GpuSample, devices: Mapping[str, frozenset[Owner]]) -> set[Owner]:
    owners = set(devices.get(gpu.uuid, ()))
    for instance in gpu.mig_instances:
        if instance.uuid:
            owners.update(devices.get(instance.uuid, ()))
    return owners
