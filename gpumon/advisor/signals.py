"""Signals: what the advisor's rules read, from a window of snapshots and the job's hook view or py-spy estimate.

Every figure is None where nothing measured it (no NVML, no GPM, no hook, a CPU job...). The rules must treat
None as "unknown", never as zero. Signals round-trip through JSON (`to_dict` / `from_dict`) so a diagnosis can be
printed, recorded and replayed in tests.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from gpumon import protocol
from gpumon.jobs.budget import BudgetShares
from gpumon.jobs.host_profile import window_profile
from gpumon.jobs.job_view import JobView
from gpumon.jobs.jobstate import Breakdown, HookedView, StepPoint
from gpumon.jobs.pyspy.categories import USER_CODE
from gpumon.jobs.step_model import MeasuredHostTime, estimate_step_model, step_model
from gpumon.jobs.step_sums import WindowSums, window_sums
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot

SOURCE_HOOK = "hook"
SOURCE_PYSPY = "py-spy"
SOURCE_NONE = "none"

IDLE_CORE_BUSY = 25.0
"""A core busy less than this percent on average over the window counts as idle."""
SATURATED_CPU = 85.0
"""A process (one thread's worth) at or above this percent of a core is CPU-bound."""


@dataclass(frozen=True, slots=True)
class GpuSignals:
    """One GPU the job uses, averaged over the window."""

    index: int
    name: str = ""
    utilization: float | None = None
    sm_activity: float | None = None
    tensor_activity: float | None = None
    dram_bandwidth: float | None = None
    memory_used: float | None = None
    """Bytes (every process on the GPU, as NVML counts it)."""
    memory_total: float | None = None
    pcie_rx: float | None = None
    """Bytes/s host to device."""
    pcie_tx: float | None = None
    # -- clocks and throttling (NVML slow tier); shares are of the samples whose throttle reasons are known
    throttle_thermal: float | None = None
    """Share of the window with a thermal slowdown (sw_thermal, hw_thermal)."""
    throttle_power: float | None = None
    """Share of the window held at the power limit (sw_power_cap): a problem only where the limit was lowered."""
    throttle_slowdown: float | None = None
    """Share of the window with a hardware clock slowdown (hw_slowdown, hw_power_brake, board_limit, reliability)."""
    throttled_temperature: float | None = None
    """Mean degrees C while throttled (or over the window when never throttled)."""
    throttled_clock_sm: float | None = None
    """Mean SM clock in MHz while throttled (or over the window when never throttled)."""
    clock_sm_max: float | None = None
    """MHz: the GPU's highest SM clock."""
    power: float | None = None
    """Mean watts."""
    power_limit: float | None = None
    """Mean watts of the enforced power limit."""
    power_limit_default: float | None = None
    """Watts: the card's default power limit (None where NVML does not say, and in older recordings)."""


THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})
POWER_REASONS = frozenset({"sw_power_cap"})
"""The card holds its power draw at its power limit (the enforced one, which may be its default)."""
SLOWDOWN_REASONS = frozenset({"hw_slowdown", "hw_power_brake", "board_limit", "reliability"})
"""Hardware slowdowns; hw_power_brake is an external power brake (the system's power supply), not the limit."""


@dataclass(frozen=True, slots=True)
class Signals:
    """Everything the rules look at, for one job over one window."""

    source: str = SOURCE_NONE
    """Where the job-side figures come from: "hook", "py-spy" (an estimate) or "none"."""
    window_s: float | None = None
    pid: int | None = None
    command: str = ""
    device: str | None = None
    """"cuda" or "cpu": what the job computes on; None when unknown."""
    gpu_error: str | None = None
    """Why there are no GPU figures (no NVML...), from the sampler."""
    # -- the job's GPUs (means over the window, over the GPUs the job uses)
    gpus: tuple[GpuSignals, ...] = ()
    gpu_util: float | None = None
    sm_activity: float | None = None
    tensor_activity: float | None = None
    dram_bandwidth: float | None = None
    pcie_rx: float | None = None
    pcie_tx: float | None = None
    # -- steps (hook)
    steps: int | None = None
    step_ms: float | None = None
    data_share: float | None = None
    """Share of each step's wall time spent blocked on the next batch."""
    gpu_share: float | None = None
    """Share of each step covered by GPU work (CUDA events); None when not measured."""
    rest_share: float | None = None
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    samples_per_step: float | None = None
    syncs_per_step: float | None = None
    """Host-device synchronizations per step, from a diagnosis window; None when not counted."""
    sync_sites: tuple[str, ...] = ()
    """"file:line (count)" of the most frequent sync sites."""
    # -- the step time budget (hook, sampled steps): shares of their wall time, the first five add up to 1
    budget_steps: int | None = None
    """Budgeted steps in the window; None: no budget (an older hook, or no sampled step yet)."""
    data_worker_share: float | None = None
    data_collate_share: float | None = None
    h2d_share: float | None = None
    sync_wait_share: float | None = None
    python_share: float | None = None
    """The rest of the Python step (launches, optimizer, the script's code)."""
    h2d_bytes_per_step: float | None = None
    h2d_pageable: float | None = None
    """Share of the copied bytes from pageable host memory."""
    h2d_rate: float | None = None
    """Bytes/s while copying host->device."""
    budget_syncs_per_step: float | None = None
    """Calls that waited on the GPU per budgeted step (.item(), .cpu(), synchronize...)."""
    # -- host time the hook timed itself (shares of the wall time; `*_idle`: the part with the training stream idle)
    gc_share: float | None = None
    """Python's garbage collector: its passes' time over the window."""
    gc_idle_share: float | None = None
    gc_passes_per_s: float | None = None
    gc_gen2_per_s: float | None = None
    gc_ms_per_pass: float | None = None
    empty_cache_share: float | None = None
    """torch.cuda.empty_cache(): its calls' time over the window."""
    empty_cache_idle_share: float | None = None
    empty_cache_per_step: float | None = None
    empty_cache_sites: tuple[str, ...] = ()
    device_allocs_per_step: float | None = None
    """The caching allocator's cudaMalloc calls per step (torch.cuda.memory_stats, budgeted steps)."""
    d2h_share: float | None = None
    """Device->host copies (.cpu(), .to("cpu")): the host's time in them, budgeted steps."""
    d2h_idle_share: float | None = None
    d2h_bytes_per_step: float | None = None
    optimizer_share: float | None = None
    """The host's time in optimizer.step(), budgeted steps."""
    optimizer_on_cpu: bool | None = None
    """The optimizer's parameters live on the CPU while the job computes on a GPU."""
    # -- the step model (hook: the stack sampler with the GPU's state; jobs.step_model): shares of the time
    step_shares: Mapping[str, float] = field(default_factory=dict)
    """Owner -> share of the step time (gpu_busy, data, h2d, sync_wait, sync_idle, comm, launch, cpu, other; they add
    up to 1); empty without a step model."""
    step_busy_from: str | None = None
    """How GPU busy was read: "stream" (the training stream at each sample) or "nvml" (GPU-Util)."""
    step_samples: int | None = None
    idle_lines: tuple[str, ...] = ()
    """The job's lines where the GPU idled most: "file:line (function)"..."""
    idle_line_shares: tuple[float, ...] = ()
    """...and the share of the time it idled at each."""
    idle_line_activities: tuple[str, ...] = ()
    # -- the DataLoader (hook)
    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None
    # -- processes and host (sampler)
    main_cpu: float | None = None
    """The job's main process, percent of one core."""
    worker_cpu: tuple[float, ...] = ()
    """Each DataLoader worker (or child process), percent of one core."""
    workers_in_disk_wait: float | None = None
    """Share of worker samples in uninterruptible (disk) sleep."""
    job_read_bytes_per_s: float | None = None
    """Reads of the job and its children from storage."""
    cores: int | None = None
    idle_cores: int | None = None
    cpu_total: float | None = None
    iowait: float | None = None
    disk_read_bytes_per_s: float | None = None
    # -- precision (hook)
    autocast: bool | None = None
    """An enabled autocast context was seen; None when the hook cannot say."""
    autocast_dtype: str | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str | None = None
    cudnn_benchmark: bool | None = None
    # -- memory (hook, CUDA)
    peak_memory: int | None = None
    """torch.cuda.max_memory_allocated, bytes."""
    reserved_memory: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None
    # -- a profiler capture (gpumon profile / diagnose --profile; advisor.trace_summary.TraceSummary.signal_values)
    capture_steps: int | None = None
    """Steps in the capture; None: no capture."""
    capture_step_ms: float | None = None
    """Mean step time during the capture (its ProfilerStep marks)."""
    comm_ms_per_step: float | None = None
    """NCCL kernel time per captured step; None without NCCL kernels."""
    comm_exposed_ms_per_step: float | None = None
    """Of it, the time no compute kernel ran beside it on the same GPU."""
    comm_overlap_share: float | None = None
    """Share of the NCCL time hidden behind compute kernels."""
    # -- torch.distributed collectives timed live by the hook (GPU-timed steps; hook.comm_timer)
    comm_live_share: float | None = None
    """Share of the timed steps' time the training stream waited in collectives; None: no timed step made one."""
    comm_live_ms_per_step: float | None = None
    comm_live_steps: int | None = None
    """Timed steps that made collectives, in the window."""
    # -- a distributed job's straggler (the hook's ranks; jobs.jobstate.find_straggler)
    ranks: int | None = None
    """Ranks seen; None: not a distributed job (or its ranks were not attached)."""
    straggler_rank: int | None = None
    straggler_pid: int | None = None
    straggler_step_ms: float | None = None
    straggler_data_share: float | None = None
    straggler_gpu_share: float | None = None
    straggler_rest_share: float | None = None
    others_step_ms: float | None = None
    """Median mean step time of the other live ranks."""
    others_data_share: float | None = None
    """Median data-wait share of the other live ranks."""
    # -- py-spy estimate
    pyspy: Mapping[str, float] = field(default_factory=dict)
    """Share of main-thread samples per py-spy category (data_wait, cuda_sync, forward, ...)."""
    pyspy_samples: int | None = None
    pyspy_native: bool | None = None
    """py-spy sampled with --native (C/C++ frames: a sync inside .item() seen as such)."""
    pyspy_user_line: str | None = None
    """The job's own frame most often sampled in its own code."""
    pyspy_sync_evidence: Mapping[str, int] = field(default_factory=dict)
    """py-spy CUDA sync samples by how they were recognised (native frame, torch function, source text only)."""

    @property
    def has_gpm(self) -> bool:
        return self.sm_activity is not None

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpus) or self.device == "cuda"

    @property
    def workers(self) -> int:
        return len(self.worker_cpu)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pyspy"] = dict(self.pyspy)
        data["pyspy_sync_evidence"] = dict(self.pyspy_sync_evidence)
        data["step_shares"] = dict(self.step_shares)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signals:
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {key: value for key, value in data.items() if key in known}
        values["gpus"] = tuple(
            GpuSignals(**{k: v for k, v in gpu.items() if k in _GPU_FIELDS}) for gpu in data.get("gpus") or ()
        )
        for name in (
            "worker_cpu",
            "sync_sites",
            "idle_lines",
            "idle_line_shares",
            "idle_line_activities",
            "empty_cache_sites",
        ):
            values[name] = tuple(data.get(name) or ())
        values["pyspy"] = dict(data.get("pyspy") or {})
        values["pyspy_sync_evidence"] = dict(data.get("pyspy_sync_evidence") or {})
        values["step_shares"] = dict(data.get("step_shares") or {})
        return cls(**values)


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


def _throttle_values(samples: Sequence[GpuSample]) -> dict[str, float | None]:
    """Shares of the samples with each kind of throttling, and the temperature and SM clock while throttled."""
    known = [gpu for gpu in samples if gpu.throttle_reasons is not None]
    if not known:
        return {}
    values: dict[str, float | None] = {}
    for name, reasons in (
        ("throttle_thermal", THERMAL_REASONS),
        ("throttle_power", POWER_REASONS),
        ("throttle_slowdown", SLOWDOWN_REASONS),
    ):
        values[name] = sum(1 for gpu in known if reasons & set(gpu.throttle_reasons or ())) / len(known)
    every = THERMAL_REASONS | POWER_REASONS | SLOWDOWN_REASONS
    throttled = [gpu for gpu in known if every & set(gpu.throttle_reasons or ())] or known
    values["throttled_temperature"] = _mean(gpu.temperature for gpu in throttled)
    values["throttled_clock_sm"] = _mean(gpu.clock_sm for gpu in throttled)
    return values


def gpu_signals(snapshots: Sequence[Snapshot], index: int) -> GpuSignals:
    samples = [gpu for snapshot in snapshots for gpu in snapshot.gpus if gpu.index == index]
    return GpuSignals(
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
        **_throttle_values(samples),
    )


def _host_values(snapshots: Sequence[Snapshot]) -> dict[str, Any]:
    # The first snapshot of a sampler has zero rates (its counters were just primed): skip all-zero CPU readings.
    cpu_samples = [s.cpu for s in snapshots if s.cpu.per_core and any(s.cpu.per_core)]
    values: dict[str, Any] = {
        "cores": None,
        "idle_cores": None,
        "cpu_total": None,
        "iowait": None,
        "disk_read_bytes_per_s": None,
    }
    if cpu_samples:
        cores = max(len(c.per_core) for c in cpu_samples)
        per_core = [_mean(c.per_core[i] for c in cpu_samples if i < len(c.per_core)) or 0.0 for i in range(cores)]
        values["cores"] = cores
        values["idle_cores"] = sum(1 for busy in per_core if busy < IDLE_CORE_BUSY)
        values["cpu_total"] = _mean(c.total for c in cpu_samples)
        values["iowait"] = _mean(c.iowait for c in cpu_samples)
    if snapshots:
        values["disk_read_bytes_per_s"] = _mean(sum(d.read_bytes_per_s for d in s.disks) for s in snapshots)
    return values


def _process_values(snapshots: Sequence[Snapshot], pid: int | None, worker_pids: Sequence[int]) -> dict[str, Any]:
    values: dict[str, Any] = {
        "main_cpu": None,
        "worker_cpu": (),
        "workers_in_disk_wait": None,
        "job_read_bytes_per_s": None,
    }
    if pid is None:
        return values
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
    values["main_cpu"] = _mean(p.cpu_percent for p in main)
    worker_cpu = [_mean(p.cpu_percent for p in samples) for samples in children.values()]
    values["worker_cpu"] = tuple(round(c, 1) for c in worker_cpu if c is not None)
    states = [p.state for samples in children.values() for p in samples if p.state is not None]
    if states:
        values["workers_in_disk_wait"] = sum(1 for s in states if s == "disk-sleep") / len(states)
    values["job_read_bytes_per_s"] = _mean(reads)
    return values


def _step_values(view: HookedView, start: float | None, end: float | None) -> dict[str, Any]:
    """Step figures over the whole window: from the view's step records where they reach back to its start, else
    from its per-second sums (a fast job's records cover only its last second or two)."""
    window = steps_in_window(view.steps, start, end)
    kept_all = sum(second.steps for second in view.step_sums) <= len(view.steps)
    reaches_back = bool(view.steps) and start is not None and view.steps[0].t < start
    if len(window) >= 2 and (kept_all or reaches_back or not view.step_sums):
        span = window[-1].t - window[0].t + window[0].wall_ms / 1e3
        breakdown = Breakdown.of(window)
        samples = [s.samples for s in window if s.samples is not None]
        return dict(
            steps=len(window),
            step_ms=sum(s.wall_ms for s in window) / len(window),
            data_share=breakdown.data,
            gpu_share=breakdown.gpu,
            rest_share=breakdown.rest,
            steps_per_s=len(window) / span if span > 0 else None,
            samples_per_s=sum(samples) / span if samples and span > 0 else None,
            samples_per_step=sum(samples) / len(samples) if samples else None,
        )
    sums = window_sums(view.step_sums, start, end)
    if round(sums.steps) >= 2 and sums.wall_ms > 0:
        return _values_from_sums(sums)
    stats = view.stats
    return dict(
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


def _values_from_sums(sums: WindowSums) -> dict[str, Any]:
    """The same figures as from step records (see Breakdown.of), from sums."""
    data = min(1.0, sums.data_ms / sums.wall_ms)
    gpu: float | None = None
    rest = max(0.0, 1.0 - data)
    if sums.timed_steps > 0 and sums.timed_wall_ms > 0:
        gpu = max(0.0, min(1.0 - data, sums.gpu_busy_ms / sums.timed_wall_ms))
        rest = max(0.0, 1.0 - data - gpu)
    span = sums.span_s
    return dict(
        steps=round(sums.steps),
        step_ms=sums.wall_ms / sums.steps,
        data_share=data,
        gpu_share=gpu,
        rest_share=rest,
        steps_per_s=sums.steps / span if span > 0 else None,
        samples_per_s=sums.samples / span if sums.sampled_steps > 0 and span > 0 else None,
        samples_per_step=sums.samples / sums.sampled_steps if sums.sampled_steps > 0 else None,
    )


def _budget_values(view: HookedView, start: float | None, end: float | None) -> dict[str, Any]:
    """The step time budget over the window's budgeted steps (else the view's latest ones)."""
    budgets = [s.budget for s in steps_in_window(view.steps, start, end) if s.budget is not None]
    shares = BudgetShares.of(budgets) if budgets else view.budget
    if not shares.steps:
        return {}
    return dict(
        budget_steps=shares.steps,
        data_worker_share=shares.data_worker,
        data_collate_share=shares.data_collate,
        h2d_share=shares.h2d,
        sync_wait_share=shares.sync_wait,
        python_share=shares.rest,
        h2d_bytes_per_step=shares.h2d_bytes_per_step,
        h2d_pageable=shares.pageable,
        h2d_rate=shares.h2d_rate,
        budget_syncs_per_step=shares.syncs_per_step,
        d2h_share=shares.d2h,
        d2h_idle_share=shares.d2h_idle,
        d2h_bytes_per_step=shares.d2h_bytes_per_step,
        optimizer_share=shares.optimizer_share,
        **_host_cost_rates(view, shares, start, end),
    )


def _host_cost_rates(view: HookedView, shares: BudgetShares, start: float | None, end: float | None) -> dict[str, Any]:
    """The collector's and the allocator's figures over the whole window (the per-second sums reach back further
    than the kept step records), else over the budgeted steps' records."""
    rates = window_sums(view.step_sums, start, end).rates
    if rates.gc_share is None and rates.empty_cache_share is None:
        return dict(
            gc_share=shares.gc_share,
            gc_passes_per_s=shares.gc_passes_per_s,
            gc_gen2_per_s=shares.gc_gen2_per_s,
            gc_ms_per_pass=shares.gc_ms_per_pass,
            empty_cache_share=shares.empty_cache_share,
            empty_cache_per_step=shares.empty_cache_per_step,
            device_allocs_per_step=shares.device_allocs_per_step,
        )
    return dict(
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


def _straggler_values(view: HookedView) -> dict[str, Any]:
    """The straggling rank with its own budget, against the median of the other live ranks."""
    if not view.ranks:
        return {}
    values: dict[str, Any] = {"ranks": len(view.ranks)}
    straggler = next((rank for rank in view.ranks if rank.pid == view.straggler), None)
    if straggler is None or not straggler.wall_ms:
        return values
    others = [r for r in view.ranks if r is not straggler and not r.ended and r.wall_ms]
    walls = sorted(r.wall_ms or 0.0 for r in others)
    data_shares = sorted((r.data_ms or 0.0) / (r.wall_ms or 1.0) for r in others)
    values.update(
        straggler_rank=straggler.rank,
        straggler_pid=straggler.pid,
        straggler_step_ms=straggler.wall_ms,
        straggler_data_share=straggler.breakdown.data
        if straggler.breakdown.data is not None
        else (straggler.data_ms or 0.0) / straggler.wall_ms,
        straggler_gpu_share=straggler.breakdown.gpu,
        straggler_rest_share=straggler.breakdown.rest,
        others_step_ms=walls[len(walls) // 2] if walls else None,
        others_data_share=data_shares[len(data_shares) // 2] if data_shares else None,
    )
    return values


def _hook_values(
    view: HookedView, start: float | None, end: float | None, diagnosis: protocol.Diagnosis | None
) -> dict[str, Any]:
    values: dict[str, Any] = _step_values(view, start, end)
    values.update(_budget_values(view, start, end))
    values.update(_comm_values(view, start, end))
    diagnosis = diagnosis if diagnosis is not None else view.diagnosis
    if diagnosis and diagnosis.get("available") and diagnosis.get("steps"):
        values["syncs_per_step"] = float(diagnosis.get("syncs_total", 0)) / float(diagnosis["steps"])
        values["sync_sites"] = tuple(
            f"{site.get('file')}:{site.get('line')} ({site.get('count')})"
            for site in (diagnosis.get("sites") or [])[:5]
        )
    values.update(_straggler_values(view))
    values["optimizer_on_cpu"] = view.optimizer_on_cpu
    values["empty_cache_sites"] = view.empty_cache_sites
    loaders = view.dataloaders
    if loaders:
        loader = loaders[0]
        values.update(
            num_workers=loader.get("num_workers"),
            pin_memory=loader.get("pin_memory"),
            prefetch_factor=loader.get("prefetch_factor"),
            persistent_workers=loader.get("persistent_workers"),
            batch_size=loader.get("batch_size"),
        )
    precision = view.precision
    if precision:
        autocast = precision.get("autocast")
        if autocast is not None:
            values["autocast"] = bool(autocast.get("enabled"))
            values["autocast_dtype"] = autocast.get("dtype") or None
        elif view.state is not None:
            values["autocast"] = False  # the hook sees every autocast entry: none means none
        values.update(
            tf32_matmul=precision.get("tf32_matmul"),
            tf32_cudnn=precision.get("tf32_cudnn"),
            float32_matmul_precision=precision.get("float32_matmul_precision"),
            cudnn_benchmark=precision.get("cudnn_benchmark"),
        )
    memory = view.memory
    if memory:
        values.update(
            peak_memory=memory.get("max_allocated"),
            reserved_memory=memory.get("reserved"),
            alloc_retries=memory.get("alloc_retries"),
            ooms=memory.get("ooms"),
        )
    cuda = view.cuda
    timed = any(s.gpu_ms is not None for s in view.steps)
    if cuda.get("initialized") and (cuda.get("device") is not None or timed):
        values["device"] = "cuda"
    elif view.steps:
        values["device"] = "cpu"
    return values


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
    values: dict[str, Any] = {}
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
        values.update(_hook_values(job, start, end, diagnosis))
    elif job is not None:  # an EstimateView: mypy narrows the JobView union, so a new kind would not type-check here
        source = SOURCE_PYSPY
        pid = job.pid if pid is None else pid
        command = job.command
        fractions = job.recent_fractions if job.recent_samples else job.fractions
        values["pyspy"] = {k: round(v, 4) for k, v in fractions.items()}
        values["pyspy_samples"] = job.recent_samples or job.samples
        values["pyspy_sync_evidence"] = dict(job.recent_sync_evidence if job.recent_samples else job.sync_evidence)
        values["pyspy_native"] = job.native
        values["pyspy_user_line"] = job.hot_frames.get(USER_CODE)
    pids = [pid] if pid is not None else []
    # A hooked job whose CUDA is not initialized computes on the CPU: the machine's GPUs are not its GPUs.
    indices = [] if values.get("device") == "cpu" else job_gpu_indices(window, pids, uuids)
    gpus = tuple(gpu_signals(window, index) for index in indices)
    if gpus:
        values.update(
            gpu_util=_mean(g.utilization for g in gpus),
            sm_activity=_mean(g.sm_activity for g in gpus),
            tensor_activity=_mean(g.tensor_activity for g in gpus),
            dram_bandwidth=_mean(g.dram_bandwidth for g in gpus),
            pcie_rx=_sum_or_none(g.pcie_rx for g in gpus),
            pcie_tx=_sum_or_none(g.pcie_tx for g in gpus),
        )
        values.setdefault("device", "cuda")
    if isinstance(job, HookedView):
        values.update(_step_model_values(job, start, end, values))
    elif job is not None:
        values.update(estimate_model_values(values))
    values.update(_host_values(window))
    values.update(_process_values(window, pid, worker_pids))
    if window:
        span = window[-1].timestamp - window[0].timestamp
        values["window_s"] = round(span, 2) if span > 0 else None
        values["gpu_error"] = window[-1].gpu_error
    elif start is not None and end is not None:
        values["window_s"] = round(end - start, 2)
    return Signals(source=source, pid=pid, command=command, gpus=gpus, **values)


def _comm_values(view: HookedView, start: float | None, end: float | None) -> dict[str, Any]:
    """The collectives the hook timed live: over the window's GPU-timed steps (else the view's), the share of their
    time the training stream waited in them."""
    timed = [s for s in steps_in_window(view.steps, start, end) if s.gpu_ms is not None] or [
        s for s in view.steps if s.gpu_ms is not None
    ]
    with_comm = [s for s in timed if s.comm_ms is not None]
    wall = sum(s.wall_ms for s in timed)
    if not with_comm or wall <= 0:
        return {}
    comm = sum(s.comm_ms or 0.0 for s in with_comm)
    return dict(
        comm_live_share=min(1.0, comm / wall),
        comm_live_ms_per_step=comm / len(timed),
        comm_live_steps=len(with_comm),
    )


def _step_model_values(
    view: HookedView, start: float | None, end: float | None, values: Mapping[str, Any]
) -> dict[str, Any]:
    """The step model over the window: the sampler's counts, with GPU-Util where it could not read the stream, and
    the budget's measured sync wait where there is one."""
    if not view.host_profiles:
        return {}
    window_end = end if end is not None else view.host_profiles[-1].t
    window_start = start if start is not None else view.host_profiles[0].t - 1.0
    util = values.get("gpu_util")
    model = step_model(
        window_profile(view.host_profiles, window_start, window_end),
        nvml_busy=util / 100.0 if isinstance(util, (int, float)) else None,
        sync_wait=values.get("sync_wait_share"),
        comm_wait=values.get("comm_live_share"),
        measured=measured_host_time(values),
    )
    if model is None:
        return {}
    return dict(
        step_shares={owner: round(share, 4) for owner, share in model.shares.items()},
        step_busy_from=model.busy_from,
        step_samples=model.samples,
        idle_lines=tuple(line.where for line in model.lines),
        idle_line_shares=tuple(round(line.idle_share, 4) for line in model.lines),
        idle_line_activities=tuple(line.activity for line in model.lines),
    )


def measured_host_time(values: Mapping[str, Any]) -> MeasuredHostTime:
    """The host time the hook timed itself, as the step model takes it (0 where not measured)."""

    def share(name: str) -> float:
        value = values.get(name)
        return float(value) if isinstance(value, (int, float)) else 0.0

    return MeasuredHostTime(
        gc=share("gc_share"),
        gc_idle=share("gc_idle_share"),
        alloc=share("empty_cache_share"),
        alloc_idle=share("empty_cache_idle_share"),
        d2h=share("d2h_share"),
        d2h_idle=share("d2h_idle_share"),
        optimizer_on_cpu=values.get("optimizer_on_cpu") is True,
    )


def estimate_model_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The step model of a py-spy estimate: its fractions with GPU-Util's busy, where there is a GPU figure."""
    util, sm, fractions = values.get("gpu_util"), values.get("sm_activity"), values.get("pyspy")
    if not isinstance(util, (int, float)) or not fractions:
        return {}
    fill = sm / util if isinstance(sm, (int, float)) and util > 0 else None
    model = estimate_step_model(fractions, util / 100.0, int(values.get("pyspy_samples") or 0), fill)
    return dict(
        step_shares={owner: round(share, 4) for owner, share in model.shares.items()},
        step_busy_from=model.busy_from,
        step_samples=model.samples,
    )


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    clean = [v for v in values if v is not None]
    return sum(clean) if clean else None
