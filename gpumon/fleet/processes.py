"""One host's GPU processes as its exporter reported them to Prometheus (gpumon_process_* series)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpumon.fleet.client import PromClient, PromError, Sample, finite

PROCESS_QUERIES = {
    "gpu_memory": "gpumon_process_gpu_memory_bytes",
    "sm": "gpumon_process_sm_ratio",
    "cpu": "gpumon_process_cpu_ratio",
    "rss": "gpumon_process_resident_memory_bytes",
}
MAX_PROCESSES = 1000
"""A host's rows beyond this are left out (the biggest GPU memory first)."""


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One process on one GPU: GPU memory and RSS in bytes, SM share in percent, CPU in cores."""

    pid: str
    command: str
    gpu: str
    gpu_memory: float | None = None
    sm: float | None = None
    cpu: float | None = None
    rss: float | None = None


@dataclass(frozen=True, slots=True)
class HostProcesses:
    """A host's processes, or one line saying why there are none to show."""

    host: str
    rows: tuple[ProcessRow, ...] = ()
    error: str | None = None


def host_selector(host: str) -> str:
    """A PromQL label matcher for exactly this host (a JSON string literal is also a valid PromQL one)."""
    return "{host=" + json.dumps(host) + "}"


def read_processes(client: PromClient, host: str) -> HostProcesses:
    """Query Prometheus for `host`'s processes; never raises for Prometheus's failures."""
    selector = host_selector(host)
    try:
        answers = {name: client.query(promql + selector) for name, promql in PROCESS_QUERIES.items()}
    except PromError as error:
        return HostProcesses(host=host, error=str(error))
    values: dict[tuple[str, str], dict[str, float]] = {}
    commands: dict[tuple[str, str], str] = {}
    for name, samples in answers.items():
        for sample in samples:
            key = _key(sample)
            commands.setdefault(key, sample.label("command") or "?")
            if finite(sample.value) is not None:
                values.setdefault(key, {})[name] = sample.value
    if not commands:
        return HostProcesses(host=host, error=f"Prometheus has no gpumon_process_* series for host {host}")
    rows = [
        ProcessRow(
            pid=pid,
            command=commands[(pid, gpu)],
            gpu=gpu,
            gpu_memory=values.get((pid, gpu), {}).get("gpu_memory"),
            sm=_percent(values.get((pid, gpu), {}).get("sm")),
            cpu=values.get((pid, gpu), {}).get("cpu"),
            rss=values.get((pid, gpu), {}).get("rss"),
        )
        for pid, gpu in commands
    ]
    rows.sort(key=lambda row: (-(row.gpu_memory or 0.0), row.gpu, row.pid))
    return HostProcesses(host=host, rows=tuple(rows[:MAX_PROCESSES]))


def _key(sample: Sample) -> tuple[str, str]:
    return (sample.label("pid") or "?", sample.label("gpu") or "")


def _percent(ratio: float | None) -> float | None:
    return None if ratio is None else ratio * 100
