"""The prometheus_client Collector: holds the latest Snapshot (posted by the sampling thread) and turns it into
metric families on each scrape, so a scrape never waits on NVML or psutil."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpumon import __version__
from gpumon.exporter.dcgm import dcgm_families
from gpumon.exporter.labels import PlacementCache, label_value
from gpumon.exporter.metrics import EnergyMeter, XidCounter, gpu_families, host_families, process_families
from gpumon.exporter.pods import PodAttribution
from gpumon.sampling.snapshot import Snapshot


class FamilySource(Protocol):
    """More families for the same scrape (the hooked jobs): read only what is already in memory."""

    def families(self, host: str) -> Iterator[Metric]: ...


class SnapshotCollector(Collector):
    """Exports the latest snapshot; `on_snapshot` is the SnapshotSource callback (any thread)."""

    def __init__(
        self,
        host_label: str | None = None,
        *,
        full_command: bool = False,
        per_worker_series: bool = False,
        dcgm_names: bool = False,
        placements: PlacementCache | None = None,
        extra: FamilySource | None = None,
        source: str = "live",
        pods: PodAttribution | None = None,
    ) -> None:
        self._host_label = host_label
        self.full_command = full_command
        self.per_worker_series = per_worker_series
        self.dcgm_names = dcgm_names
        self.placements = placements if placements is not None else PlacementCache()
        self.extra = extra
        self.source = source
        self.pods = pods if pods is not None else PodAttribution()
        self.energy = EnergyMeter()
        self.xid = XidCounter()
        self.latest: Snapshot | None = None
        self._build_lock = threading.Lock()
        """One scrape builds at a time: the placement cache is not shared between threads."""

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self.energy.add(snapshot)
        self.xid.add(snapshot)
        self.latest = snapshot

    def host(self, snapshot: Snapshot | None) -> str:
        """The host label: the one asked for, else the snapshot's (a recording's own host), else this machine's."""
        chosen = self._host_label or (snapshot.hostname if snapshot is not None else "") or socket.gethostname()
        return label_value(chosen)

    def collect(self) -> Iterator[Metric]:
        snapshot = self.latest
        host = self.host(snapshot)
        with self._build_lock:
            families: list[Metric] = [self._info(host, snapshot)]
            if snapshot is not None:
                families.extend(host_families(snapshot, host))
                gpu_pods = self.pods.gpu_labels(snapshot, self.placements)
                families.extend(gpu_families(snapshot, host, self.energy.joules, self.xid.tallies, gpu_pods))
                families.extend(
                    process_families(
                        snapshot, host, self.placements, self.full_command, self.per_worker_series, self.pods
                    )
                )
                if self.dcgm_names:
                    last_xid = {uuid: tally.last for uuid, tally in self.xid.tallies.items()}
                    families.extend(dcgm_families(snapshot, host, last_xid, gpu_pods))
            if self.extra is not None:
                families.extend(self.extra.families(host))
        yield from families

    def _info(self, host: str, snapshot: Snapshot | None) -> Metric:
        info = GaugeMetricFamily(
            "gpumon_exporter_info",
            "Always 1: the exporter's version, its data source, whether it has a sample yet, and where GPUs' pods "
            "come from (pod_resources: ok while the kubelet answers, else cgroups).",
            labels=("host", "version", "source", "has_sample", "pod_resources"),
        )
        has_sample = "1" if snapshot is not None else "0"
        info.add_metric((host, __version__, self.source, has_sample, self.pods.source), 1.0)
        return info
