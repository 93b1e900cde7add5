"""Signals: what the advisor's rules read, from a window of snapshots and the job's hook view or py-spy estimate.

Every figure is None where nothing measured it (no NVML, no GPM, no hook, a CPU job...). The rules must treat
None as "unknown", never as zero. Signals round-trip through JSON (`to_dict` / `from_dict`) so a diagnosis can be
printed, recorded and replayed in tests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from gpumon import protocol
from gpumon.advisor.signal_figures import (
    DATA_WAIT_STEP_PART,
    BudgetFigures,
    CommFigures,
    GpuFigures,
    GpuSignals,
    HostFigures,
    LoaderFigures,
    MemoryFigures,
    PrecisionFigures,
    PyspyFigures,
    StepFigures,
    StepModelFigures,
    StragglerFigures,
    flat_name,
)
from gpumon.jobs.budget import BudgetShares
from gpumon.jobs.gc_totals import gc_rates
from gpumon.jobs.host_profile import window_profile
from gpumon.jobs.job_view import JobView
from gpumon.jobs.jobstate import Breakdown, HookedView, StepPoint
from gpumon.jobs.pyspy.categories import USER_CODE
from gpumon.jobs.pyspy.estimate import EstimateView
from gpumon.jobs.step_model import estimate_step_model, step_model
from gpumon.jobs.step_sums import WindowSums, window_sums
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot

SOURCE_HOOK = "hook"
SOURCE_PYSPY = "py-spy"
SOURCE_NONE = "none"

IDLE_CORE_BUSY = 25.0
"""A core busy less than this percent on average over the window counts as idle."""
SATURATED_CPU = 85.0
"""A process (one thread's worth) at or above this percent of a core is CPU-bound."""


THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})
POWER_REASONS = frozenset({"sw_power_cap"})
"""The card holds its power draw at its power limit (the enforced one, which may be its default)."""
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "hw_power_brake", "board_limit", "reliability"})
"""Hardware slowdowns; hw_power_brake is an external power brake (the system's power supply), not the limit."""


@dataclass(frozen=True, slots=True)
class Signals:
    """Everything the rules look at, for one job over one window: where it comes from, and one record per source."""

    source: str = SOURCE_NONE
    """Where the job-side figures come from: "hook", "py-spy" (an estimate) or "none"."""
    window_s: float | None = None
    pid: int | None = None
    command: str = ""
    device: str | None = None
    """"cuda" or "cpu": what the job computes on; None when unknown."""
    gpu_error: str | None = None
    """Why there are no GPU figures (no NVML...), from the sampler."""
    gpu: GpuFigures = field(default_factory=GpuFigures)
    step: StepFigures = field(default_factory=StepFigures)
    budget: BudgetFigures = field(default_factory=BudgetFigures)
    step_model: StepModelFigures = field(default_factory=StepModelFigures)
    loader: LoaderFigures = field(default_factory=LoaderFigures)
    host: HostFigures = field(default_factory=HostFigures)
    precision: PrecisionFigures = field(default_factory=PrecisionFigures)
    memory: MemoryFigures = field(default_factory=MemoryFigures)
    comm: CommFigures = field(default_factory=CommFigures)
    straggler: StragglerFigures = field(default_factory=StragglerFigures)
    pyspy: PyspyFigures = field(default_factory=PyspyFigures)

    @property
    def has_gpm(self) -> bool:
        return self.gpu.has_gpm

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu.gpus) or self.device == "cuda"

    @classmethod
    def of(cls, **flat: Any) -> Signals:
        """Signals from their flat names (as `to_dict` gives them); an unknown name is a TypeError."""
        unknown = flat.keys() - _TOP_LEVEL - _RECORD_OF_FLAT.keys()
        if unknown:
            raise TypeError(f"unknown signals: {', '.join(sorted(unknown))}")
        records: dict[str, dict[str, Any]] = {attribute: {} for attribute, _ in _RECORDS}
        for name, value in flat.items():
            if name in _RECORD_OF_FLAT:
                attribute, field_name = _RECORD_OF_FLAT[name]
                records[attribute][field_name] = value
        return cls(
            **{name: value for name, value in flat.items() if name in _TOP_LEVEL},
            **{attribute: record(**records[attribute]) for attribute, record in _RECORDS},
        )

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON of `diagnose --json`'s `signals`: every figure under its flat name."""
        data: dict[str, Any] = {name: getattr(self, name) for name in _TOP_LEVEL_ORDER}
        for attribute, record in _RECORDS:
            values = getattr(self, attribute)
            for record_field in fields(record):
                value = getattr(values, record_field.name)
                if isinstance(value, Mapping):
                    value = dict(value)
                elif record_field.name == "gpus":
                    value = tuple(asdict(gpu) for gpu in value)
                data[flat_name(record_field)] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signals:
        """Signals from their flat JSON (unknown names are left out: a recording may be newer or older)."""
        values: dict[str, Any] = {
            key: value for key, value in data.items() if key in _TOP_LEVEL or key in _RECORD_OF_FLAT
        }
        values["gpus"] = tuple(
            GpuSignals(**{k: v for k, v in gpu.items() if k in _GPU_FIELDS}) for gpu in data.get("gpus") or ()
        )
        for name in _TUPLE_FIELDS:
            values[name] = tuple(data.get(name) or ())
        for name in _MAPPING_FIELDS:
            values[name] = dict(data.get(name) or {})
        return cls.of(**values)


_RECORDS: tuple[tuple[str, type[Any]], ...] = (
    ("gpu", GpuFigures),
    ("step", StepFigures),
    ("budget", BudgetFigures),
    ("step_model", StepModelFigures),
    ("loader", LoaderFigures),
    ("host", HostFigures),
    ("precision", PrecisionFigures),
    ("memory", MemoryFigures),
    ("comm", CommFigures),
    ("straggler", StragglerFigures),
    ("pyspy", PyspyFigures),
)
_RECORD_OF_FLAT: dict[str, tuple[str, str]] = {
    flat_name(record_field): (attribute, record_field.name)
    for attribute, record in _RECORDS
    for record_field in fields(record)
}
"""Flat name -> (the record's attribute on Signals, its field in the record)."""
_TOP_LEVEL_ORDER = ("source", "window_s", "pid", "command", "device", "gpu_error")
_TOP_LEVEL = frozenset(_TOP_LEVEL_ORDER)
_TUPLE_FIELDS = (
    "worker_cpu",
    "sync_sites",
    "idle_lines",
    "idle_line_shares",
    "idle_line_activities",
    "idle_line_busy",
    "empty_cache_sites",
)
_MAPPING_FIELDS = ("pyspy", "pyspy_sync_evidence", "step_shares")
_GPU_FIELDS = {f.name for f in fields(GpuSignals)}


# ---------------------------------------------------------------------------------------------
# Assembling signals.


def _mean(values: Iterable[float | None]) -> float | None:
    clean = [float(v) for v in values if v is not None and not math.isnan(v)]
    return sum(clean) / len(clean) if clean else None


def _find_process(processes: Sequence[ProcessSample], pid: int) -> ProcessSample | None:
    for process in processes:
        if process.pid == pid:
            return process
        for child in process.children:
            if child.pid == pid:
                return child
    return None


def in_window(snapshots: Sequence[Snapshot], start: float | None = None, end: float | None = None) -> list[Snapshot]:
    """The snapshots taken within [start, end] (either bound may be open)."""
    return [s for s in snapshots if (start is None or s.timestamp >= start) and (end is None or s.timestamp <= end)]


def training_start(view: HookedView) -> float | None:
    """When the job's first training step (of the last hour) began; None before any step."""
    if view.step_sums:
        return view.step_sums[0].first_start
    return view.steps[0].t - view.steps[0].wall_ms / 1e3 if view.steps else None


def _after_startup(snapshots: Sequence[Snapshot], start: float | None, training_from: float | None) -> float | None:
    """The window's start moved past the job's start-up (importing torch, reading a checkpoint: reads that are not
    its data loading) to the first snapshot whose rates were measured after its first step began."""
    if training_from is None:
        return start
    times = [s.timestamp for s in snapshots if start is None or s.timestamp >= start]
    gaps = sorted(later - earlier for earlier, later in itertools.pairwise(times))
    interval = gaps[len(gaps) // 2] if gaps else 0.0
    startup_end = training_from + interval
    return startup_end if start is None or startup_end > start else start


def steps_in_window(steps: Sequence[StepPoint], start: float | None, end: float | None) -> list[StepPoint]:
    """Steps that ended within [start, end]."""
    return [s for s in steps if (start is None or s.t >= start) and (end is None or s.t <= end)]


def job_gpu_indices(snapshots: Sequence[Snapshot], pids: Sequence[int], uuids: Sequence[str] = ()) -> list[int]:
    """The GPUs the job uses: those its processes hold a context on (all of them: DataParallel uses several), else
    those the hook names, else the only GPU there is."""
    indices: set[int] = set()
    for snapshot in snapshots:
        for pid in pids:
            process = _find_process(snapshot.processes, pid)
            if process is not None:
                indices.update(process.gpu_indices)
    if not indices and uuids:
        for snapshot in snapshots:
            indices.update(gpu.index for gpu in snapshot.gpus if gpu.uuid in uuids)
    if not indices:
        every = {gpu.index for snapshot in snapshots for gpu in snapshot.gpus}
        if len(every) == 1:
            indices = every
    return sorted(indices)


def _throttled(gpu: GpuSignals, samples: Sequence[GpuSample]) -> GpuSignals:
    """The GPU with the shares of the samples with each kind of throttling, and the temperature and SM clock while
    throttled."""
    known = [sample for sample in samples if sample.throttle_reasons is not None]
    if not known:
        return gpu

    def share(reasons: frozenset[str]) -> float:
        return sum(1 for sample in known if reasons & set(sample.throttle_reasons or ())) / len(known)

    every = THERMAL_REASONS | POWER_REASONS | SLOWDOWN_REASONS
    throttled = [sample for sample in known if every & set(sample.throttle_reasons or ())] or known
    return replace(
        gpu,
        throttle_thermal=share(THERMAL_REASONS),
        throttle_power=share(POWER_REASONS),
        throttle_slowdown=share(SLOWDOWN_REASONS),
        throttled_temperature=_mean(sample.temperature for sample in throttled),
        throttled_clock_sm=_mean(sample.clock_sm for sample in throttled),
    )


def gpu_signals(snapshots: Sequence[Snapshot], index: int) -> GpuSignals:
    samples = [gpu for snapshot in snapshots for gpu in snapshot.gpus if gpu.index == index]
    gpu = GpuSignals(
        index=index,
        name=samples[-1].name if samples else "",
        utilization=_mean(g.utilization_gpu for g in samples),
        sm_activity=_mean(g.sm_activity for g in samples),
        tensor_activity=_mean(g.tensor_activity for g in samples),
        dram_bandwidth=_mean(g.dram_bandwidth for g in samples),
        memory_used=_mean(g.memory_used for g in samples),
        memory_total=_mean(g.memory_total for g in samples),
        pcie_rx=_mean(g.pcie_rx for g in samples),
        pcie_tx=_mean(g.pcie_tx for g in samples),
        clock_sm_max=max((g.clock_sm_max for g in samples if g.clock_sm_max is not None), default=None),
        power=_mean(g.power for g in samples),
        power_limit=_mean(g.power_limit for g in samples),
        power_limit_default=max(
            (g.power_limit_default for g in samples if g.power_limit_default is not None), default=None
        ),
    )
    return _throttled(gpu, samples)


def gpu_figures(gpus: tuple[GpuSignals, ...]) -> GpuFigures:
    """The job's GPUs with their means (PCIe: their sums)."""
    if not gpus:
        return GpuFigures()
    return GpuFigures(
        gpus=gpus,
        gpu_util=_mean(g.utilization for g in gpus),
        sm_activity=_mean(g.sm_activity for g in gpus),
        tensor_activity=_mean(g.tensor_activity for g in gpus),
        dram_bandwidth=_mean(g.dram_bandwidth for g in gpus),
        pcie_rx=_sum_or_none(g.pcie_rx for g in gpus),
        pcie_tx=_sum_or_none(g.pcie_tx for g in gpus),
    )


def _host_figures(snapshots: Sequence[Snapshot], pid: int | None, worker_pids: Sequence[int]) -> HostFigures:
    """The machine's CPUs and disks, with the job's processes."""
    # The first snapshot of a sampler has zero rates (its counters were just primed): skip all-zero CPU readings.
    cpu_samples = [s.cpu for s in snapshots if s.cpu.per_core and any(s.cpu.per_core)]
    machine = HostFigures(
        disk_read_bytes_per_s=_mean(sum(d.read_bytes_per_s for d in s.disks) for s in snapshots) if snapshots else None
    )
    if cpu_samples:
        cores = max(len(c.per_core) for c in cpu_samples)
        per_core = [_mean(c.per_core[i] for c in cpu_samples if i < len(c.per_core)) or 0.0 for i in range(cores)]
        machine = replace(
            machine,
            cores=cores,
            idle_cores=sum(1 for busy in per_core if busy < IDLE_CORE_BUSY),
            cpu_total=_mean(c.total for c in cpu_samples),
            iowait=_mean(c.iowait for c in cpu_samples),
        )
    return _with_processes(machine, snapshots, pid, worker_pids)


def _with_processes(
    machine: HostFigures, snapshots: Sequence[Snapshot], pid: int | None, worker_pids: Sequence[int]
) -> HostFigures:
    """The machine's figures with the job's main process and its workers (or child processes)."""
    if pid is None:
        return machine
    main: list[ProcessSample] = []
    children: dict[int, list[ProcessSample]] = {}
    reads: list[float] = []
    for snapshot in snapshots:
        process = _find_process(snapshot.processes, pid)
        if process is None:
            continue
        main.append(process)
        total_read: float | None = process.read_bytes_per_s
        for child in process.children:
            if worker_pids and child.pid not in worker_pids:
                continue
            children.setdefault(child.pid, []).append(child)
            if child.read_bytes_per_s is not None:
                total_read = (total_read or 0.0) + child.read_bytes_per_s
        if total_read is not None:
            reads.append(total_read)
    worker_cpu = [_mean(p.cpu_percent for p in samples) for samples in children.values()]
    states = [p.state for samples in children.values() for p in samples if p.state is not None]
    return replace(
        machine,
        main_cpu=_mean(p.cpu_percent for p in main),
        worker_cpu=tuple(round(c, 1) for c in worker_cpu if c is not None),
        workers_in_disk_wait=sum(1 for s in states if s == "disk-sleep") / len(states) if states else None,
        job_read_bytes_per_s=_mean(reads),
    )


def _step_figures(view: HookedView, start: float | None, end: float | None) -> StepFigures:
    """Step figures over the whole window: from the view's step records where they reach back to its start, else
    from its per-second sums (a fast job's records cover only its last second or two)."""
    window = steps_in_window(view.steps, start, end)
    kept_all = sum(second.steps for second in view.step_sums) <= len(view.steps)
    reaches_back = bool(view.steps) and start is not None and view.steps[0].t < start
    if len(window) >= 2 and (kept_all or reaches_back or not view.step_sums):
        span = window[-1].t - window[0].t + window[0].wall_ms / 1e3
        breakdown = Breakdown.of(window)
        samples = [s.samples for s in window if s.samples is not None]
        return StepFigures(
            steps=len(window),
            step_ms=sum(s.wall_ms for s in window) / len(window),
            data_share=breakdown.data,
            data_wait_steps=sum(s.data_ms >= DATA_WAIT_STEP_PART * s.wall_ms > 0 for s in window) / len(window),
            gpu_share=breakdown.gpu,
            rest_share=breakdown.rest,
            steps_per_s=len(window) / span if span > 0 else None,
            samples_per_s=sum(samples) / span if samples and span > 0 else None,
            samples_per_step=sum(samples) / len(samples) if samples else None,
        )
    sums = window_sums(view.step_sums, start, end)
    if round(sums.steps) >= 2 and sums.wall_ms > 0:
        return _step_figures_from_sums(sums)
    stats = view.stats
    return StepFigures(
        steps=stats.steps or None,
        step_ms=stats.wall_ms,
        data_share=stats.breakdown.data,
        gpu_share=stats.breakdown.gpu,
        rest_share=stats.breakdown.rest,
        steps_per_s=stats.steps_per_s,
        samples_per_s=stats.samples_per_s,
        samples_per_step=(
            stats.samples_per_s / stats.steps_per_s if stats.samples_per_s and stats.steps_per_s else None
        ),
    )


def _step_figures_from_sums(sums: WindowSums) -> StepFigures:
    """The same figures as from step records (see Breakdown.of), from sums."""
    data = min(1.0, sums.data_ms / sums.wall_ms)
    gpu: float | None = None
    rest = max(0.0, 1.0 - data)
    if sums.timed_steps > 0 and sums.timed_wall_ms > 0:
        gpu = max(0.0, min(1.0 - data, sums.gpu_busy_ms / sums.timed_wall_ms))
        rest = max(0.0, 1.0 - data - gpu)
    span = sums.span_s
    return StepFigures(
        steps=round(sums.steps),
        step_ms=sums.wall_ms / sums.steps,
        data_share=data,
        gpu_share=gpu,
        rest_share=rest,
        steps_per_s=sums.steps / span if span > 0 else None,
        samples_per_s=sums.samples / span if sums.sampled_steps > 0 and span > 0 else None,
        samples_per_step=sums.samples / sums.sampled_steps if sums.sampled_steps > 0 else None,
    )


def _with_syncs(step: StepFigures, diagnosis: protocol.Diagnosis | None) -> StepFigures:
    """The step figures with a diagnosis window's sync count and its most frequent sites."""
    if not diagnosis or not diagnosis.get("available") or not diagnosis.get("steps"):
        return step
    return replace(
        step,
        syncs_per_step=float(diagnosis.get("syncs_total", 0)) / float(diagnosis["steps"]),
        sync_sites=tuple(
            f"{site.get('file')}:{site.get('line')} ({site.get('count')})"
            for site in (diagnosis.get("sites") or [])[:5]
        ),
    )


def _budget_figures(view: HookedView, start: float | None, end: float | None) -> BudgetFigures:
    """The step time budget over the window's budgeted steps (else the view's latest ones), with the host time the
    hook timed itself."""
    known = BudgetFigures(
        optimizer_on_cpu=view.optimizer_on_cpu,
        optimizer_host_bytes=view.optimizer_host_bytes,
        empty_cache_sites=view.empty_cache_sites,
    )
    budgets = [s.budget for s in steps_in_window(view.steps, start, end) if s.budget is not None]
    shares = BudgetShares.of(budgets) if budgets else view.budget
    if not shares.steps:
        return _gc_from_state(known, view, start, end)
    budget = replace(
        known,
        budget_steps=shares.steps,
        budget_step_ms=shares.step_ms,
        data_worker_share=shares.data_worker,
        data_collate_share=shares.data_collate,
        h2d_share=shares.h2d,
        sync_wait_share=shares.sync_wait,
        h2d_wait_share=shares.h2d_wait,
        python_share=shares.rest,
        h2d_bytes_per_step=shares.h2d_bytes_per_step,
        h2d_pageable=shares.pageable,
        h2d_rate=shares.h2d_rate,
        budget_syncs_per_step=shares.syncs_per_step,
        d2h_share=shares.d2h,
        d2h_idle_share=shares.d2h_idle,
        d2h_bytes_per_step=shares.d2h_bytes_per_step,
        optimizer_share=shares.optimizer_share,
    )
    return _with_host_costs(budget, view, shares, start, end)


def _with_host_costs(
    budget: BudgetFigures, view: HookedView, shares: BudgetShares, start: float | None, end: float | None
) -> BudgetFigures:
    """The collector's and the allocator's figures over the whole window (the per-second sums reach back further
    than the kept step records), else over the budgeted steps' records; the collector's, where neither has it (no
    step record, or no budgeted one, in the window), from the state's totals."""
    rates = window_sums(view.step_sums, start, end).rates
    if rates.gc_share is None and rates.empty_cache_share is None:
        budget = replace(
            budget,
            gc_share=shares.gc_share,
            gc_passes_per_s=shares.gc_passes_per_s,
            gc_gen2_per_s=shares.gc_gen2_per_s,
            gc_ms_per_pass=shares.gc_ms_per_pass,
            empty_cache_share=shares.empty_cache_share,
            empty_cache_per_step=shares.empty_cache_per_step,
            device_allocs_per_step=shares.device_allocs_per_step,
        )
        return _gc_from_state(budget, view, start, end) if budget.gc_share is None else budget
    return replace(
        budget,
        gc_share=rates.gc_share,
        gc_idle_share=rates.gc_idle_share,
        gc_passes_per_s=rates.gc_passes_per_s,
        gc_gen2_per_s=rates.gc_gen2_per_s,
        gc_ms_per_pass=rates.gc_ms_per_pass,
        empty_cache_share=rates.empty_cache_share,
        empty_cache_idle_share=rates.empty_cache_idle_share,
        empty_cache_per_step=rates.empty_cache_per_step,
        device_allocs_per_step=rates.device_allocs_per_step,
    )


def _gc_from_state(budget: BudgetFigures, view: HookedView, start: float | None, end: float | None) -> BudgetFigures:
    """The collector's figures from the state's totals over the window (unchanged where they do not cover it)."""
    rates = gc_rates(view.gc_points, start, end)
    if rates is None:
        return budget
    return replace(
        budget,
        gc_share=rates.share,
        gc_idle_share=rates.idle_share,
        gc_passes_per_s=rates.passes_per_s,
        gc_gen2_per_s=rates.gen2_per_s,
        gc_ms_per_pass=rates.ms_per_pass,
    )


def _straggler_figures(view: HookedView) -> StragglerFigures:
    """The straggling rank with its own budget, against the median of the other live ranks."""
    if not view.ranks:
        return StragglerFigures()
    straggler = next((rank for rank in view.ranks if rank.pid == view.straggler), None)
    if straggler is None or not straggler.wall_ms:
        return StragglerFigures(ranks=len(view.ranks))
    others = [r for r in view.ranks if r is not straggler and not r.ended and r.wall_ms]
    walls = sorted(r.wall_ms or 0.0 for r in others)
    data_shares = sorted((r.data_ms or 0.0) / (r.wall_ms or 1.0) for r in others)
    return StragglerFigures(
        ranks=len(view.ranks),
        rank=straggler.rank,
        pid=straggler.pid,
        step_ms=straggler.wall_ms,
        data_share=straggler.breakdown.data
        if straggler.breakdown.data is not None
        else (straggler.data_ms or 0.0) / straggler.wall_ms,
        gpu_share=straggler.breakdown.gpu,
        rest_share=straggler.breakdown.rest,
        others_step_ms=walls[len(walls) // 2] if walls else None,
        others_data_share=data_shares[len(data_shares) // 2] if data_shares else None,
    )


def _loader_figures(view: HookedView) -> LoaderFigures:
    """The settings of the job's first DataLoader."""
    if not view.dataloaders:
        return LoaderFigures()
    loader = view.dataloaders[0]
    return LoaderFigures(
        num_workers=loader.get("num_workers"),
        pin_memory=loader.get("pin_memory"),
        prefetch_factor=loader.get("prefetch_factor"),
        persistent_workers=loader.get("persistent_workers"),
        batch_size=loader.get("batch_size"),
    )


def _precision_figures(view: HookedView) -> PrecisionFigures:
    """The job's autocast, TF32, matmul precision and cudnn.benchmark."""
    precision = view.precision
    if not precision:
        return PrecisionFigures()
    autocast = precision.get("autocast")
    enabled: bool | None = None
    dtype: str | None = None
    if autocast is not None:
        enabled = bool(autocast.get("enabled"))
        dtype = autocast.get("dtype") or None
    elif view.state is not None:
        enabled = False  # the hook sees every autocast entry: none means none
    return PrecisionFigures(
        autocast=enabled,
        autocast_dtype=dtype,
        tf32_matmul=precision.get("tf32_matmul"),
        tf32_cudnn=precision.get("tf32_cudnn"),
        float32_matmul_precision=precision.get("float32_matmul_precision"),
        cudnn_benchmark=precision.get("cudnn_benchmark"),
    )


def _memory_figures(view: HookedView) -> MemoryFigures:
    """The job's peak and reserved CUDA memory, the allocator's retries and the OOMs."""
    memory = view.memory
    if not memory:
        return MemoryFigures()
    return MemoryFigures(
        peak_memory=memory.get("max_allocated"),
        reserved_memory=memory.get("reserved"),
        alloc_retries=memory.get("alloc_retries"),
        ooms=memory.get("ooms"),
    )


def _hook_device(view: HookedView) -> str | None:
    """What the hooked job computes on: "cuda" where its CUDA is initialized, "cpu" where it steps without."""
    cuda = view.cuda
    timed = any(s.gpu_ms is not None for s in view.steps)
    if cuda.get("initialized") and (cuda.get("device") is not None or timed):
        return "cuda"
    return "cpu" if view.steps else None


def _pyspy_figures(job: EstimateView) -> PyspyFigures:
    """The py-spy estimate's shares of the main thread's samples (its recent ones where there are)."""
    recent = bool(job.recent_samples)
    fractions = job.recent_fractions if recent else job.fractions
    return PyspyFigures(
        shares={k: round(v, 4) for k, v in fractions.items()},
        samples=job.recent_samples or job.samples,
        sync_evidence=dict(job.recent_sync_evidence if recent else job.sync_evidence),
        native=job.native,
        user_line=job.hot_frames.get(USER_CODE),
    )


@dataclass(frozen=True, slots=True)
class _JobFigures:
    """What the job's own view (hook or py-spy) gives, before the GPUs are known."""

    device: str | None = None
    step: StepFigures = field(default_factory=StepFigures)
    budget: BudgetFigures = field(default_factory=BudgetFigures)
    loader: LoaderFigures = field(default_factory=LoaderFigures)
    precision: PrecisionFigures = field(default_factory=PrecisionFigures)
    memory: MemoryFigures = field(default_factory=MemoryFigures)
    comm: CommFigures = field(default_factory=CommFigures)
    straggler: StragglerFigures = field(default_factory=StragglerFigures)
    pyspy: PyspyFigures = field(default_factory=PyspyFigures)


def _hook_figures(
    view: HookedView, start: float | None, end: float | None, diagnosis: protocol.Diagnosis | None
) -> _JobFigures:
    return _JobFigures(
        device=_hook_device(view),
        step=_with_syncs(_step_figures(view, start, end), diagnosis if diagnosis is not None else view.diagnosis),
        budget=_budget_figures(view, start, end),
        loader=_loader_figures(view),
        precision=_precision_figures(view),
        memory=_memory_figures(view),
        comm=_comm_figures(view, start, end),
        straggler=_straggler_figures(view),
    )


def build_signals(
    snapshots: Sequence[Snapshot],
    job: JobView | None = None,
    *,
    pid: int | None = None,
    start: float | None = None,
    end: float | None = None,
    diagnosis: protocol.Diagnosis | None = None,
) -> Signals:
    """Signals of one job over [start, end] (unix times; open bounds take everything given).

    snapshots: the sampler's snapshots (the job's pid must have been tracked so its processes are in them).
    job: the hook's HookedView, or the py-spy EstimateView (every kind of JobView is handled), or None (GPU and host
    figures only).
    diagnosis: a `diagnosis` message (sync counts) to use instead of the view's latest.
    """
    training_from = training_start(job) if isinstance(job, HookedView) else None
    window = in_window(snapshots, _after_startup(snapshots, start, training_from), end)
    figures = _JobFigures()
    source = SOURCE_NONE
    worker_pids: list[int] = []
    uuids: list[str] = []
    command = ""
    if isinstance(job, HookedView):
        source = SOURCE_HOOK
        pid = job.pid if pid is None else pid
        worker_pids = job.worker_pids
        uuids = job.device_uuids
        command = job.command
        figures = _hook_figures(job, start, end, diagnosis)
    elif job is not None:  # an EstimateView: mypy narrows the JobView union, so a new kind would not type-check here
        source = SOURCE_PYSPY
        pid = job.pid if pid is None else pid
        command = job.command
        figures = _JobFigures(pyspy=_pyspy_figures(job))
    pids = [pid] if pid is not None else []
    # A hooked job whose CUDA is not initialized computes on the CPU: the machine's GPUs are not its GPUs.
    indices = [] if figures.device == "cpu" else job_gpu_indices(window, pids, uuids)
    gpu = gpu_figures(tuple(gpu_signals(window, index) for index in indices))
    device = figures.device or ("cuda" if gpu.gpus else None)
    model = StepModelFigures()
    host = _host_figures(window, pid, worker_pids)
    if isinstance(job, HookedView):
        model = _step_model_figures(job, start, end, gpu, figures.budget, figures.comm)
    elif job is not None:
        model = estimate_model_figures(gpu, figures.pyspy, host.main_cpu)
    window_s: float | None = None
    if window:
        span = window[-1].timestamp - window[0].timestamp
        window_s = round(span, 2) if span > 0 else None
    elif start is not None and end is not None:
        window_s = round(end - start, 2)
    return Signals(
        source=source,
        window_s=window_s,
        pid=pid,
        command=command,
        device=device,
        gpu_error=window[-1].gpu_error if window else None,
        gpu=gpu,
        step=figures.step,
        budget=figures.budget,
        step_model=model,
        loader=figures.loader,
        host=host,
        precision=figures.precision,
        memory=figures.memory,
        comm=figures.comm,
        straggler=figures.straggler,
        pyspy=figures.pyspy,
    )


def _comm_figures(view: HookedView, start: float | None, end: float | None) -> CommFigures:
    """The collectives the hook timed live: over the window's GPU-timed steps (else the view's), the share of their
    time the training stream waited in them."""
    timed = [s for s in steps_in_window(view.steps, start, end) if s.gpu_ms is not None] or [
        s for s in view.steps if s.gpu_ms is not None
    ]
    with_comm = [s for s in timed if s.comm_ms is not None]
    wall = sum(s.wall_ms for s in timed)
    if not with_comm or wall <= 0:
        return CommFigures()
    comm = sum(s.comm_ms or 0.0 for s in with_comm)
    return CommFigures(
        comm_live_share=min(1.0, comm / wall),
        comm_live_ms_per_step=comm / len(timed),
        comm_live_steps=len(with_comm),
    )


def _step_model_figures(
    view: HookedView, start: float | None, end: float | None, gpu: GpuFigures, budget: BudgetFigures, comm: CommFigures
) -> StepModelFigures:
    """The step model over the window: the sampler's counts, with GPU-Util where it could not read the stream, and
    the budget's measured sync wait where there is one."""
    if not view.host_profiles:
        return StepModelFigures()
    window_end = end if end is not None else view.host_profiles[-1].t
    window_start = start if start is not None else view.host_profiles[0].t - 1.0
    model = step_model(
        window_profile(view.host_profiles, window_start, window_end),
        nvml_busy=gpu.gpu_util / 100.0 if gpu.gpu_util is not None else None,
        sync_wait=budget.sync_wait_share,
        comm_wait=comm.comm_live_share,
        measured=budget.measured_host_time(),
    )
    if model is None:
        return StepModelFigures()
    return StepModelFigures(
        step_shares={owner: round(share, 4) for owner, share in model.shares.items()},
        step_busy_from=model.busy_from,
        step_samples=model.samples,
        idle_lines=tuple(line.where for line in model.lines),
        idle_line_shares=tuple(round(line.idle_share, 4) for line in model.lines),
        idle_line_activities=tuple(line.activity for line in model.lines),
        idle_line_busy=tuple(
            None if line.busy_fraction is None else round(line.busy_fraction, 4) for line in model.lines
        ),
    )


def estimate_model_figures(gpu: GpuFigures, pyspy: PyspyFigures, main_cpu: float | None = None) -> StepModelFigures:
    """The step model of a py-spy estimate: its fractions with GPU-Util's busy, where there is a GPU figure (the main
    process's CPU percent tells an optimizer computing on the host)."""
    util, sm = gpu.gpu_util, gpu.sm_activity
    if util is None or not pyspy.shares:
        return StepModelFigures()
    fill = sm / util if sm is not None and util > 0 else None
    model = estimate_step_model(pyspy.shares, util / 100.0, int(pyspy.samples or 0), fill, gpu.pcie_tx, main_cpu)
    return StepModelFigures(
        step_shares={owner: round(share, 4) for owner, share in model.shares.items()},
        step_busy_from=model.busy_from,
        step_samples=model.samples,
    )


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return sum(clean) if clean else None
