"""The typed records that make up Signals: one per source of figures, each named as `diagnose --json` names them.

A field's flat name (its key in `signals` of `diagnose --json`) is its own name, or the one its metadata gives
(`flat_name`). Every figure is None where nothing measured it; the rules treat None as unknown, never as zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field
from typing import Any

from gpumon.jobs.step_model import MeasuredHostTime


def _flat(name: str, default: Any = None) -> Any:
    """A field whose key in the flat JSON is `name`."""
    return field(default=default, metadata={"flat": name})


def flat_name(record_field: Field[Any]) -> str:
    """The key of a record's field in the flat JSON."""
    return str(record_field.metadata.get("flat", record_field.name))


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


@dataclass(frozen=True, slots=True)
class GpuFigures:
    """The job's GPUs (sampler): each one, and the means over them."""

    gpus: tuple[GpuSignals, ...] = ()
    gpu_util: float | None = None
    sm_activity: float | None = None
    tensor_activity: float | None = None
    dram_bandwidth: float | None = None
    pcie_rx: float | None = None
    pcie_tx: float | None = None

    @property
    def has_gpm(self) -> bool:
        return self.sm_activity is not None


DATA_WAIT_STEP_PART = 0.1
"""The part of its wall a step waits for its batch from which it counts in `data_wait_steps`."""


@dataclass(frozen=True, slots=True)
class StepFigures:
    """The hook's steps that ended in the window, and the syncs of a diagnosis window."""

    steps: int | None = None
    step_ms: float | None = None
    data_share: float | None = None
    """Share of each step's wall time spent blocked on the next batch."""
    data_wait_steps: float | None = None
    """Of the window's steps, the share that waited for their batch at least DATA_WAIT_STEP_PART of their wall: a
    loader that sets the pace makes nearly every step wait, one that falls behind now and then a few (None: from
    per-second sums, which keep no step's own wait)."""
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


@dataclass(frozen=True, slots=True)
class BudgetFigures:
    """The hook's step time budget (sampled steps: shares of their wall time, the first five add up to 1) and the
    host time it timed itself (`*_idle`: the part with the training stream idle)."""

    budget_steps: int | None = None
    """Budgeted steps in the window; None: no budget (an older hook, or no sampled step yet)."""
    budget_step_ms: float | None = None
    """The budgeted steps' mean host time (ms): against the step's mean (`step_ms`), how typical they were."""
    data_worker_share: float | None = None
    data_collate_share: float | None = None
    h2d_share: float | None = None
    sync_wait_share: float | None = None
    h2d_wait_share: float | None = None
    """Of sync_wait_share, blocking host->device copies that found GPU work queued: a copy's wait (pageable memory)."""
    python_share: float | None = None
    """The rest of the Python step (launches, optimizer, the script's code)."""
    h2d_bytes_per_step: float | None = None
    h2d_pageable: float | None = None
    """Share of the copied bytes from pageable host memory."""
    h2d_rate: float | None = None
    """Bytes/s while copying host->device."""
    budget_syncs_per_step: float | None = None
    """Calls that waited on the GPU per budgeted step (.item(), .cpu(), synchronize...)."""
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
    optimizer_host_bytes: float | None = None
    """The bytes of those parameters: about what such an optimizer copies each way a step."""

    def measured_host_time(self) -> MeasuredHostTime:
        """The host time the hook timed itself, as the step model takes it (0 where not measured)."""
        return MeasuredHostTime(
            gc=self.gc_share or 0.0,
            gc_idle=self.gc_idle_share or 0.0,
            alloc=self.empty_cache_share or 0.0,
            alloc_idle=self.empty_cache_idle_share or 0.0,
            d2h=self.d2h_share or 0.0,
            d2h_idle=self.d2h_idle_share or 0.0,
            h2d_wait=self.h2d_wait_share or 0.0,
            optimizer_on_cpu=self.optimizer_on_cpu is True,
        )


@dataclass(frozen=True, slots=True)
class StepModelFigures:
    """The step model over the window (hook: the stack sampler with the GPU's state; py-spy: its estimate)."""

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
    idle_line_busy: tuple[float | None, ...] = ()
    """...and, of each line's samples with the GPU's state known, the fraction with work queued on the stream."""


@dataclass(frozen=True, slots=True)
class LoaderFigures:
    """The job's first DataLoader's settings (hook)."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    batch_size: int | None = None


@dataclass(frozen=True, slots=True)
class HostFigures:
    """The job's processes and the machine's CPUs and disks (sampler)."""

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

    @property
    def workers(self) -> int:
        return len(self.worker_cpu)


@dataclass(frozen=True, slots=True)
class PrecisionFigures:
    """The job's precision settings (hook)."""

    autocast: bool | None = None
    """An enabled autocast context was seen; None when the hook cannot say."""
    autocast_dtype: str | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str | None = None
    cudnn_benchmark: bool | None = None


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """The job's CUDA memory (hook)."""

    peak_memory: int | None = None
    """torch.cuda.max_memory_allocated, bytes."""
    reserved_memory: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None


@dataclass(frozen=True, slots=True)
class CommFigures:
    """torch.distributed's time: from a profiler capture (advisor.trace_summary.TraceSummary.signal_values) and the
    collectives the hook timed live (GPU-timed steps; hook.comm_timer)."""

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
    comm_live_share: float | None = None
    """Share of the timed steps' time the training stream waited in collectives; None: no timed step made one."""
    comm_live_ms_per_step: float | None = None
    comm_live_steps: int | None = None
    """Timed steps that made collectives, in the window."""


@dataclass(frozen=True, slots=True)
class StragglerFigures:
    """A distributed job's straggling rank against the others (the hook's ranks; jobs.jobstate.find_straggler)."""

    ranks: int | None = None
    """Ranks seen; None: not a distributed job (or its ranks were not attached)."""
    rank: int | None = _flat("straggler_rank")
    pid: int | None = _flat("straggler_pid")
    step_ms: float | None = _flat("straggler_step_ms")
    data_share: float | None = _flat("straggler_data_share")
    gpu_share: float | None = _flat("straggler_gpu_share")
    rest_share: float | None = _flat("straggler_rest_share")
    others_step_ms: float | None = None
    """Median mean step time of the other live ranks."""
    others_data_share: float | None = None
    """Median data-wait share of the other live ranks."""


@dataclass(frozen=True, slots=True)
class PyspyFigures:
    """A py-spy estimate of the job's main thread."""

    shares: Mapping[str, float] = field(default_factory=dict, metadata={"flat": "pyspy"})
    """Share of main-thread samples per py-spy category (data_wait, cuda_sync, forward, ...)."""
    samples: int | None = _flat("pyspy_samples")
    native: bool | None = _flat("pyspy_native")
    """py-spy sampled with --native (C/C++ frames: a sync inside .item() seen as such)."""
    user_line: str | None = _flat("pyspy_user_line")
    """The job's own frame most often sampled in its own code."""
    sync_evidence: Mapping[str, int] = field(default_factory=dict, metadata={"flat": "pyspy_sync_evidence"})
    """py-spy CUDA sync samples by how they were recognised (native frame, torch function, source text only)."""
