"""Every host Prometheus knows, and its state: up, DOWN (scrape failing, gone, or its sample stale), NVML FAILED.

A host is known by its scrape target: `up` of the scrape jobs that served gpumon_exporter_info in the last
LOOKBACK, and the host label each target served. A target that was never seen serving gpumon in its job is named
by its address. A host's lost GPUs (the exporter's sampling error 'GPU 3 lost (...)') are not a host failure: the
host stays up and those GPUs are shown off the bus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from gpumon.fleet.client import PromClient, Sample, finite

LOOKBACK = "1h"
"""How far back a host that stopped answering is still remembered (and its last sample's time found)."""
STALE_AFTER = 60.0
"""A sample older than this when Prometheus scraped it means a stuck sampler: the host is DOWN. The exporter
samples every 5 s by default (10 s at most), so this is several of its intervals and of common scrape intervals."""
HOST_QUERIES = {
    "up": "up",
    "known": f"last_over_time(gpumon_exporter_info[{LOOKBACK}])",
    "alive": "gpumon_exporter_info",
    "last_sample": f"max by (host) (last_over_time(gpumon_snapshot_timestamp_seconds[{LOOKBACK}]))",
    "sample_age": "timestamp(gpumon_snapshot_timestamp_seconds) - gpumon_snapshot_timestamp_seconds",
    "sampling": "gpumon_gpu_sampling_up",
}
INFO_LABELS = frozenset({"__name__", "version", "source", "has_sample", "host"})
"""gpumon_exporter_info's own labels; the rest (instance, job, what relabeling added) describe the host."""
_LOST_GPU = re.compile(r"GPU (\d+) (?:lost|unavailable) \(([^;]*)\)")
"""The sampler's words for one GPU it cannot read: 'GPU 3 lost (GPU is lost); retrying every 10 s'."""


class HostState(Enum):
    UP = "up"
    DOWN = "DOWN"
    NVML_FAILED = "NVML FAILED"


@dataclass(frozen=True, slots=True)
class HostRow:
    """One host: its state, one line why (printable by the caller), since when it has no fresh sample, its target
    labels, and the GPUs its exporter says are lost (index -> why)."""

    name: str
    state: HostState = HostState.UP
    detail: str | None = None
    since: float | None = None
    labels: tuple[tuple[str, str], ...] = ()
    lost_gpus: tuple[tuple[str, str], ...] = ()


def read_hosts(client: PromClient, now: float, stale_after: float = STALE_AFTER) -> dict[str, HostRow]:
    """Every host Prometheus knows by name (PromError when Prometheus cannot be read)."""
    answers = {name: client.query(promql, at=now) for name, promql in HOST_QUERIES.items()}
    targets: dict[tuple[str, str], Sample] = {_target(s): s for s in answers["known"]}
    gpumon_jobs = {s.label("job") for s in answers["known"]}
    alive = {s.label("host") or "?": s for s in answers["alive"]}
    host_up: dict[str, bool] = {}
    scraped: set[str] = set()
    labels: dict[str, tuple[tuple[str, str], ...]] = {}
    for sample in answers["up"]:
        known = targets.get(_target(sample))
        if known is None and sample.label("job") not in gpumon_jobs:
            continue  # another exporter's target (node_exporter, Prometheus itself)
        name = (known.label("host") if known else None) or sample.label("instance") or "?"
        host_up[name] = host_up.get(name, False) or sample.value == 1
        scraped.add(name)
        labels.setdefault(name, _host_labels(known or sample))
    for known in targets.values():
        name = known.label("host") or "?"
        labels.setdefault(name, _host_labels(known))
        if name not in host_up:
            host_up[name] = name in alive  # scraped without `up` (a remote-written Prometheus), or gone
    last_sample = {s.label("host") or "?": s.value for s in answers["last_sample"] if finite(s.value) is not None}
    age = {s.label("host") or "?": s.value for s in answers["sample_age"] if finite(s.value) is not None}
    sampling = {s.label("host") or "?": s for s in answers["sampling"]}
    hosts: dict[str, HostRow] = {}
    for name in host_up.keys() | alive.keys():
        up = host_up.get(name, True)
        since = last_sample.get(name)
        row = HostRow(name=name, since=since, labels=labels.get(name, ()))
        replayed = name in alive and alive[name].label("source") == "replay"  # a recording's own old timestamps
        if not up:
            row = _replace(row, HostState.DOWN, "scrape failing" if name in scraped else "not scraped any more")
        elif not replayed and age.get(name, 0.0) > stale_after:
            row = _replace(row, HostState.DOWN, f"sampler stuck: its sample was {age[name]:.0f} s old when scraped")
        elif name in sampling and sampling[name].value == 0:
            error = sampling[name].label("error") or "GPUs cannot be read"
            lost = tuple((index, why) for index, why in _LOST_GPU.findall(error))
            if lost:
                row = HostRow(name, HostState.UP, None, since, row.labels, lost)
            else:
                row = _replace(row, HostState.NVML_FAILED, error)
        hosts[name] = row
    return hosts


def _replace(row: HostRow, state: HostState, detail: str) -> HostRow:
    return HostRow(row.name, state, detail, row.since, row.labels, row.lost_gpus)


def _target(sample: Sample) -> tuple[str, str]:
    return (sample.label("instance") or "", sample.label("job") or "")


def _host_labels(sample: Sample) -> tuple[tuple[str, str], ...]:
    return tuple((key, value) for key, value in sample.labels if key not in INFO_LABELS)
