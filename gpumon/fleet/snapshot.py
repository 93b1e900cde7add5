"""One immutable FleetSnapshot read from Prometheus: per host and GPU, and per job grouped across hosts by run id."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from gpumon.fleet.client import PromClient, PromError, Sample, Series, finite
from gpumon.fleet.health import (
    ALERT,
    ECC_QUERY,
    HEALTH_QUERY,
    RECENT_XID_QUERY,
    THROTTLE_QUERY,
    Problem,
    gpu_problems,
)
from gpumon.fleet.hosts import HOST_QUERIES, LOOKBACK, STALE_AFTER, HostRow, HostState, read_hosts
from gpumon.jobs.jobstate import RankSummary, find_straggler

HISTORY_SECONDS = 300.0
HISTORY_POINTS = 60
"""Points per graph: a range query's step is HISTORY_SECONDS / HISTORY_POINTS (at least 1 s)."""
EMPTY_ANSWER = "Prometheus has no gpumon_gpu_* series: is a gpumon exporter scraped?"

GPU_QUERIES = {
    "utilization": "gpumon_gpu_utilization_ratio",
    "sm_active": "gpumon_gpu_sm_active_ratio",
    "memory_used": "gpumon_gpu_memory_used_bytes",
    "memory_total": f"last_over_time(gpumon_gpu_memory_total_bytes[{LOOKBACK}])",
}
"""memory_total over LOOKBACK also names every GPU a host had: one without a fresh memory_used is off the bus."""
MODEL_QUERY = "gpumon_gpu_info"
HISTORY_QUERIES = {
    "utilization": "gpumon_gpu_utilization_ratio",
    "sm_active": "gpumon_gpu_sm_active_ratio",
    "memory": "gpumon_gpu_memory_used_bytes / gpumon_gpu_memory_total_bytes",
}
JOB_QUERIES = {"step": "gpumon_job_step_seconds", "data_wait": "gpumon_job_data_wait_ratio"}
FINDING_QUERY = "gpumon_job_finding"
HEALTH_QUERIES = (HEALTH_QUERY, ECC_QUERY, THROTTLE_QUERY, RECENT_XID_QUERY, MODEL_QUERY)
QUERIES_PER_ROUND = (
    len(HOST_QUERIES) + len(GPU_QUERIES) + len(HISTORY_QUERIES) + len(HEALTH_QUERIES) + len(JOB_QUERIES) + 1
)
OFF_BUS = "off the bus"

GpuKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One GPU of one host: newest values (percent, bytes) and its recent history in percent, oldest first."""

    host: str
    gpu: str
    utilization: float | None = None
    sm_active: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None
    utilization_history: tuple[float | None, ...] = ()
    sm_history: tuple[float | None, ...] = ()
    memory_history: tuple[float | None, ...] = ()
    problems: tuple[Problem, ...] = ()
    """Worst first; an off-the-bus GPU has one ALERT starting with OFF_BUS (and no fresh values)."""
    model: str | None = None

    @property
    def severity(self) -> int:
        """0 healthy, else the worst problem's: WARNING or ALERT."""
        return max((problem.severity for problem in self.problems), default=0)

    @property
    def off_bus(self) -> bool:
        return any(problem.text.startswith(OFF_BUS) for problem in self.problems)


@dataclass(frozen=True, slots=True)
class RankRow:
    """One rank of a job: where it runs, its mean step time (ms) and data-wait share (percent)."""

    host: str
    pid: str
    rank: int | None
    step_ms: float | None
    data_wait: float | None


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job: its ranks across hosts, the straggler (index into ranks) and the exporter's finding.

    `run_id` is what groups the ranks: the exporter's job key ('run:ID@ADDR:PORT'), else the run id, else host:pid."""

    run_id: str
    command: str
    ranks: tuple[RankRow, ...]
    straggler: int | None = None
    finding: str | None = None
    confidence: float | None = None


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """What Prometheus said at `taken`; `error` is one line when it said nothing useful (the rows are then empty).

    `hosts` names every host Prometheus knows, down ones included; `host_rows` says each one's state, by name."""

    taken: float
    gpus: tuple[GpuRow, ...] = ()
    jobs: tuple[JobRow, ...] = ()
    error: str | None = None
    hosts: tuple[str, ...] = field(default=())
    host_rows: tuple[HostRow, ...] = field(default=())
    left_out: int = 0
    """Series Prometheus answered beyond the MAX_SERIES taken from each query (a fleet of more GPUs than that)."""

    def host(self, name: str) -> HostRow:
        return next((row for row in self.host_rows if row.name == name), HostRow(name))


def read_fleet(client: PromClient, now: float | None = None, stale_after: float = STALE_AFTER) -> FleetSnapshot:
    """Query Prometheus once; never raises for Prometheus's failures (they become the snapshot's error line)."""
    taken = time.time() if now is None else now
    try:
        with client.refresh():
            hosts = read_hosts(client, taken, stale_after)
            gpus = _gpu_rows(client, taken, hosts)
            jobs = _job_rows(client, taken)
    except PromError as error:
        return FleetSnapshot(taken=taken, error=str(error))
    for row in gpus:
        hosts.setdefault(row.host, HostRow(row.host))  # an exporter older than gpumon_exporter_info
    if not gpus and not hosts:
        return FleetSnapshot(taken=taken, jobs=jobs, error=EMPTY_ANSWER)
    names = tuple(sorted(hosts, key=natural_host))
    rows = tuple(hosts[name] for name in names)
    return FleetSnapshot(taken=taken, gpus=gpus, jobs=jobs, hosts=names, host_rows=rows, left_out=client.left_out)


def _gpu_rows(client: PromClient, now: float, hosts: dict[str, HostRow]) -> tuple[GpuRow, ...]:
    newest = {name: _by_gpu(client.query(promql, at=now)) for name, promql in GPU_QUERIES.items()}
    step = max(1.0, HISTORY_SECONDS / HISTORY_POINTS)
    start = now - HISTORY_SECONDS
    history = {
        name: _history_by_gpu(client.query_range(promql, start, now, step), start, step)
        for name, promql in HISTORY_QUERIES.items()
    }
    health = _health(client, now)
    fresh = newest["memory_used"].keys() | newest["utilization"].keys()
    rows = []
    for host, gpu in sorted(set().union(*(values.keys() for values in newest.values())), key=_natural):
        state = hosts[host] if host in hosts else HostRow(host)
        if state.state is not HostState.UP:
            continue  # a DOWN or NVML FAILED host is one line; its last values are not news
        utilization = _percent(newest["utilization"].get((host, gpu)))
        values, ecc, throttles, recent_xid, model = health.get((host, gpu), ({}, None, frozenset(), False, None))
        problems = gpu_problems(
            values, ecc_uncorrected=ecc, throttles=throttles, recent_xid=recent_xid, utilization=utilization
        )
        if (host, gpu) not in fresh:
            lost = dict(state.lost_gpus).get(gpu)
            problems = (Problem(f"{OFF_BUS} ({lost})" if lost else OFF_BUS, ALERT), *problems)
        rows.append(
            GpuRow(
                host=host,
                gpu=gpu,
                utilization=utilization,
                sm_active=_percent(newest["sm_active"].get((host, gpu))),
                memory_used=newest["memory_used"].get((host, gpu)),
                memory_total=newest["memory_total"].get((host, gpu)),
                utilization_history=history["utilization"].get((host, gpu), ()),
                sm_history=history["sm_active"].get((host, gpu), ()),
                memory_history=history["memory"].get((host, gpu), ()),
                problems=problems,
                model=model,
            )
        )
    return tuple(rows)


HealthOf = tuple[dict[str, float], float | None, frozenset[str], bool, str | None]


def _health(client: PromClient, now: float) -> dict[GpuKey, HealthOf]:
    """Per GPU: its health gauges by short name, uncorrected ECC errors, active throttle reasons, whether an XID
    came in the last 10 minutes, and its model."""
    values: dict[GpuKey, dict[str, float]] = {}
    for sample in client.query(HEALTH_QUERY, at=now):
        if finite(sample.value) is not None:
            name = (sample.label("__name__") or "").removeprefix("gpumon_gpu_")
            values.setdefault(_gpu_key(sample), {})[name] = sample.value
    ecc = _by_gpu(client.query(ECC_QUERY, at=now))
    throttles: dict[GpuKey, set[str]] = {}
    for sample in client.query(THROTTLE_QUERY, at=now):
        throttles.setdefault(_gpu_key(sample), set()).add(sample.label("reason") or "?")
    recent_xid = {_gpu_key(sample) for sample in client.query(RECENT_XID_QUERY, at=now)}
    models = {_gpu_key(sample): sample.label("model") for sample in client.query(MODEL_QUERY, at=now)}
    keys = values.keys() | ecc.keys() | throttles.keys() | recent_xid | models.keys()
    return {
        key: (values.get(key, {}), ecc.get(key), frozenset(throttles.get(key, ())), key in recent_xid, models.get(key))
        for key in keys
    }


def _gpu_key(sample: Sample) -> GpuKey:
    return (sample.label("host") or "?", sample.label("gpu") or "?")


def _by_gpu(samples: tuple[Sample, ...]) -> dict[GpuKey, float]:
    return {_gpu_key(s): s.value for s in samples if finite(s.value) is not None}


def _history_by_gpu(series: tuple[Series, ...], start: float, step: float) -> dict[GpuKey, tuple[float | None, ...]]:
    """Each GPU's values on the fixed grid start, start+step, ... (None where Prometheus had no point), in percent."""
    found: dict[GpuKey, tuple[float | None, ...]] = {}
    for one in series:
        cells: list[float | None] = [None] * (HISTORY_POINTS + 1)
        for stamp, value in one.points:
            index = round((stamp - start) / step)
            if 0 <= index < len(cells):
                cells[index] = _percent(value)
        found[(one.label("host") or "?", one.label("gpu") or "?")] = tuple(cells)
    return found


def _job_rows(client: PromClient, now: float) -> tuple[JobRow, ...]:
    step = {_rank_key(s): s for s in client.query(JOB_QUERIES["step"], at=now)}
    wait = {_rank_key(s): s.value for s in client.query(JOB_QUERIES["data_wait"], at=now)}
    findings: dict[str, tuple[str, float]] = {}
    for sample in client.query(FINDING_QUERY, at=now):
        group = _group(sample)
        if group not in findings or sample.value > findings[group][1]:
            findings[group] = (sample.label("category") or "?", sample.value)
    grouped: dict[str, list[tuple[Sample, float | None]]] = {}
    for key, sample in step.items():
        grouped.setdefault(_group(sample), []).append((sample, wait.get(key)))
    jobs = []
    for group, members in sorted(grouped.items()):
        ranks = tuple(
            sorted(
                (
                    RankRow(
                        host=sample.label("host") or "?",
                        pid=sample.label("pid") or "?",
                        rank=_int(sample.label("rank")),
                        step_ms=_scaled(sample.value, 1000.0),
                        data_wait=_percent(data_wait),
                    )
                    for sample, data_wait in members
                ),
                key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.host, r.pid),
            )
        )
        finding = findings.get(group)
        jobs.append(
            JobRow(
                run_id=group,
                command=members[0][0].label("command") or "?",
                ranks=ranks,
                straggler=_straggler(ranks),
                finding=finding[0] if finding else None,
                confidence=finite(finding[1]) if finding else None,
            )
        )
    return tuple(jobs)


def _straggler(ranks: tuple[RankRow, ...]) -> int | None:
    """find_straggler's rule on ranks from every host; pids repeat across hosts, so each rank goes by its index."""
    summaries = [
        RankSummary(
            rank=row.rank,
            pid=index,
            steps_per_s=None,
            wall_ms=row.step_ms,
            data_ms=_data_ms(row),
            gpu_ms=None,
            ended=False,
        )
        for index, row in enumerate(ranks)
    ]
    return find_straggler(summaries)


def _data_ms(row: RankRow) -> float | None:
    if row.step_ms is None or row.data_wait is None:
        return None
    return row.step_ms * row.data_wait / 100


def _rank_key(sample: Sample) -> tuple[str, str]:
    return (sample.label("host") or "?", sample.label("pid") or "?")


JOB_KEY_LABELS = ("training_job", "exported_job", "job")
"""Where the exporter's job key is found: `training_job`; exporters before it named the label `job`, which Prometheus
stored as exported_job (or kept as `job` with honor_labels), so series they left are still grouped."""
_JOB_KEY_PREFIXES = ("run:", "rdzv:")


def _group(sample: Sample) -> str:
    """What the ranks of one job share on every host: the exporter's job key (torchrun run id and rendezvous
    address), else the bare run id (an exporter without the job label), else the job's own host and pid."""
    for name in JOB_KEY_LABELS:
        key = sample.label(name)
        if key and key.startswith(_JOB_KEY_PREFIXES):
            return key
    run_id = sample.label("run_id")
    return run_id if run_id else f"{sample.label('host') or '?'}:{sample.label('pid') or '?'}"


def _percent(ratio: float | None) -> float | None:
    return _scaled(ratio, 100.0)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None or finite(value) is None else value * factor


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _natural(key: GpuKey) -> tuple[tuple[str | int, ...], int, str]:
    host, gpu = key
    return (natural_host(host), int(gpu) if gpu.isdigit() else 1 << 30, gpu)


def natural_host(name: str) -> tuple[str | int, ...]:
    """'node-2' before 'node-10': the digit runs of a name compared as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


_DIGITS = re.compile(r"(\d+)")
