"""The message shapes as TypedDicts: docs/protocol.md in code, and the source the validator is built from.

A message's required fields (`decode` refuses it without them) sit in a total `_...Fields` base class; the
subclass (total=False) adds the fields that may be absent. Every field present is type-checked (see
gpumon.protocol.validate). Bases instead of `typing.Required`, which Python 3.10 lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict


class _Typed(TypedDict):
    type: str


class CudaDevice(TypedDict, total=False):
    """One CUDA device the job sees (hello's and state's `cuda.devices`)."""

    index: int
    name: str
    uuid: str | None  # "GPU-xxxxxxxx-...", as nvidia-smi and NVML print it
    total_memory: int  # bytes
    capability: list[int]  # [major, minor]


class CudaInfo(TypedDict, total=False):
    """The job's CUDA as it sees it: initialized or not, its visible devices and the one its steps run on."""

    initialized: bool  # False until the job itself touches CUDA; the hook never initializes it
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES as the job sees it
    torch_cuda: str | None  # torch.version.cuda
    device: int | None  # the device the job's steps run on (optimizer params, else current device)
    devices: list[CudaDevice]  # empty while not initialized


class DistInfo(TypedDict, total=False):
    """The job's torch.distributed place (torchrun's variables, then the process group): how ranks group."""

    rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    group_rank: int | None
    run_id: str | None  # TORCHELASTIC_RUN_ID
    master_addr: str | None
    master_port: str | None
    initialized: bool  # torch.distributed.is_initialized()
    backend: str | None


class _HelloFields(_Typed):
    protocol: int
    pid: int


class Hello(_HelloFields, total=False):
    """`hello`: the first message on every connection: the job process, its command, torch, CUDA and ranks."""

    ppid: int
    uid: int
    hostname: str
    argv: list[str]
    cwd: str
    executable: str
    python: str
    torch: str | None
    hook_version: str
    started: float  # unix time the hook was installed
    injected: bool  # True when installed by `gpumon run` (environment injection)
    cuda: CudaInfo
    dist: DistInfo
    socket_refused: str | None  # socket directories the hook refused (and why) before the one it serves in


class StepBudget(TypedDict, total=False):
    """A step record's `budget`: where a sampled step's time went (data, copies, syncs, optimizer, GC)."""

    data_worker_ms: float  # data wait not spent collating: the workers' queue, or (no workers) Dataset.__getitem__
    data_collate_ms: float  # the main process's collate_fn (num_workers 0); 0 with workers, which collate themselves
    h2d_ms: float  # host time in host->device copy calls (Tensor.to / cuda / copy_)
    h2d_bytes: int  # every host->device copy's, those of h2d_wait_bytes included
    h2d_pageable_bytes: int  # of h2d_bytes, copied from pageable (not pinned) host memory
    h2d_copies: int
    h2d_wait_ms: float  # of sync_wait_ms, blocking host->device copies that found GPU work queued: wait and copy
    h2d_wait_bytes: int  # of h2d_bytes, those copies' bytes
    d2h_ms: float  # host time in device->host copy calls (.cpu(), .to("cpu"), copy_ into a host tensor), waits included
    d2h_bytes: int
    d2h_copies: int
    d2h_idle_ms: float  # of d2h_ms, blocking copies' time after the stream had drained: the GPU's SMs idle
    sync_wait_ms: float  # host time blocked in other calls that wait for the GPU (.item(), synchronize, ...)
    syncs: int  # calls timed that waited for the GPU, blocking device->host copies included
    gpu_ms: float | None  # the record's gpu_ms again (None: not measured)
    rest_ms: float  # the rest of the Python step: wall_ms minus data, copies both ways and sync waits
    optimizer_ms: float  # host time in optimizer.step() (overlaps the copies and syncs made inside it)
    empty_cache_ms: float  # time in torch.cuda.empty_cache() during the step (any thread)
    empty_cache_calls: int
    # Cumulative since the hook started, as they stand at the end of the step:
    gc_ms_total: float  # time in Python's garbage collector (any thread: a collection stops them all)
    gc_passes_total: int  # collections
    gc_gen2_total: int  # of which full (generation 2)
    gc_collected_total: int  # objects the collections found unreachable
    gc_idle_ms_total: float  # of gc_ms_total, passes (generation 1 and 2) begun with the training stream idle
    empty_cache_ms_total: float
    empty_cache_idle_ms_total: float  # of it, the frees after the current stream had drained: the GPU idle
    empty_cache_calls_total: int
    device_allocs_total: int  # the caching allocator's cudaMalloc calls on the job's device; absent without CUDA
    device_frees_total: int  # its cudaFree calls; absent without CUDA


class StepRecord(TypedDict, total=False):
    """One training step as the hook saw it: its number, times, samples, GPU time and what ended it."""

    seq: int  # 1, 2, 3, ... per process; consecutive
    t: float  # unix time at the end of the step
    wall_ms: float  # time since the previous step boundary
    data_ms: float  # time blocked in DataLoader __next__ during the step
    gpu_ms: float | None  # GPU time between the step's start and end events; None: not measured
    samples: int | None  # batch size(s) fetched during the step; None: unknown
    syncs: int  # host-device synchronizations; present only inside a diagnosis window
    comm_ms: float  # GPU-timed steps only: the training stream's wait in torch.distributed collectives (sync mode)
    source: str  # one of STEP_SOURCES
    budget: (
        StepBudget  # where the step's time went; only on sampled steps (one in BUDGET_EVERY, every step of a diagnosis)
    )


class StepStats(TypedDict, total=False):
    """A `steps` message's rolling rates and means over the last few seconds of steps."""

    window_s: float  # the span the rates are computed over (at most STATS_WINDOW_S)
    steps: int  # steps in the window
    steps_per_s: float | None
    samples_per_s: float | None
    wall_ms: float | None  # mean over the window
    data_ms: float | None
    gpu_ms: float | None  # mean over steps that have it
    data_fraction: float | None  # sum(data) / sum(wall)
    gpu_fraction: float | None  # sum(gpu) / sum(wall), over steps that have gpu_ms


class _StepsFields(_Typed):
    records: list[StepRecord]  # new since the previous `steps` to this client, oldest first, at most 256


class Steps(_StepsFields, total=False):
    """`steps`: the step records new to this client, with the rolling statistics."""

    t: float
    last_seq: int  # all records up to this seq have now been sent to this client (0: no step yet)
    dropped: int  # records this client missed (overflow); rates in `stats` still count them
    stats: StepStats


class DataLoaderInfo(TypedDict, total=False):
    """One DataLoader of the job: its settings, worker pids and fetch totals (state's `dataloaders`)."""

    id: int  # id() of the DataLoader object, stable while it lives
    dataset: str  # the dataset's class name
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    drop_last: bool
    worker_pids: list[int]
    batches: int  # batches fetched through it
    wait_ms: float  # total time blocked in its __next__
    last_used: float  # unix time


class MemoryInfo(TypedDict, total=False):
    """The job's CUDA caching allocator on its device (state's `memory`)."""

    device: int
    allocated: int  # bytes, torch.cuda.memory_allocated
    reserved: int  # torch.cuda.memory_reserved
    max_allocated: int  # torch.cuda.max_memory_allocated
    alloc_retries: int  # cudaMalloc retries after freeing the cache (memory pressure)
    ooms: int
    total: int | None  # device memory, bytes


class AutocastInfo(TypedDict, total=False):
    """The autocast contexts the training thread entered: device type, dtype, how often, when last."""

    device_type: str
    dtype: str  # "torch.bfloat16"
    enabled: bool
    entered: int  # times an autocast context was entered
    last_t: float  # unix time of the last entry


class PrecisionInfo(TypedDict, total=False):
    """The job's precision settings: autocast seen, TF32, float32 matmul precision, cuDNN flags."""

    autocast: AutocastInfo | None  # None: no autocast context seen
    tf32_matmul: bool  # torch.backends.cuda.matmul.allow_tf32
    tf32_cudnn: bool  # torch.backends.cudnn.allow_tf32
    float32_matmul_precision: str  # torch.get_float32_matmul_precision()
    cudnn_benchmark: bool
    cudnn_deterministic: bool


class KnobState(TypedDict, total=False):
    """The knobs in effect, waiting for a boundary, refused or left to the script (state's `knobs`)."""

    applied: dict[str, Any]  # knobs in effect, by name
    pending: dict[str, Any]  # accepted, not yet applied (waiting for a step boundary)
    errors: list[str]  # e.g. a bad GPUMON_KNOBS
    ignored: list[str]  # GPUMON_KNOBS names the hook does not know, left to the script (e.g. amp_bf16)


class DiagnosisState(TypedDict, total=False):
    """Whether a sync-count diagnosis window runs, and its steps left (state's `diagnosis`)."""

    active: bool
    steps_left: int


class GcTotals(TypedDict, total=False):
    """Python's garbage collector since the hook started timing it (state's `gc`): the same cumulative figures a
    budgeted step carries, every second whether or not steps are budgeted or their records arrive."""

    ms_total: float  # time in the collector's passes
    idle_ms_total: float  # of which with the training stream idle
    passes_total: int
    gen2_total: int  # full collections
    collected_total: int  # objects freed


class HookInfo(TypedDict, total=False):
    """The hook's own health: exceptions swallowed, clients, server restarts (state's `hook`)."""

    errors: int  # exceptions inside the hook, swallowed
    last_error: str | None
    clients: int
    installed_at: float
    server_restarts: int  # times the server thread's loop failed and was restarted
    socket_refused: str | None  # as in hello


class FlopCount(TypedDict, total=False):
    """The FLOPs of one sampled step, or why none were counted (state's `flops`, for MFU)."""

    available: bool  # False: not counted (reason says why); the count fields then absent
    reason: str | None
    flops_per_step: int  # FLOPs of the counted step, forward and backward (torch.utils.flop_counter)
    conv_flops_per_step: int  # of which in convolutions (cuDNN's TF32 setting applies to these)
    seq: int  # the step counted
    samples: int | None  # that step's samples; None: unknown
    t: float  # unix time of the count


class SampledLine(TypedDict, total=False):
    """One line of the job the stack sampler saw: its activity and samples by GPU state."""

    file: str
    line: int
    function: str
    activity: str  # one of gpumon.protocol.activity.ACTIVITIES
    counts: list[int]  # samples at this line: [GPU idle, GPU busy, GPU state unknown], since the sampler started


class HostSamples(TypedDict, total=False):
    """The stack sampler's counts: samples per activity and per line, by GPU idle, busy or unknown."""

    hz: float  # samples a second the sampler aims at
    samples: int  # samples taken since it started
    gpu_state: str | None  # why the GPU's state is not read (e.g. CUDA graphs in use); None: read at each sample
    activities: dict[str, list[int]]  # activity -> [GPU idle, GPU busy, GPU state unknown] samples, cumulative
    lines: list[SampledLine]  # the lines with the most samples, most first (at most SAMPLED_LINES_SENT)
    cost_ms: float  # CPU time the sampler thread has used


OptimizerInfo = TypedDict("OptimizerInfo", {"class": str, "params_device": str, "host_bytes": int}, total=False)
"""An optimizer the job steps: its class name and where its parameters live ("cuda", "cpu", "mixed", ...)."""


class SyncSite(TypedDict):
    """A line of the job and how many times it called something (syncs, empty_cache), most first."""

    file: str
    line: int
    count: int


class State(_Typed, total=False):
    """`state` (every second, and the reply to `get_state`): loaders, memory, precision, knobs, FLOPs, host samples."""

    t: float
    last_seq: int
    step_source: str | None  # which signal marks steps now (one of STEP_SOURCES), None: no step yet
    dataloaders: list[DataLoaderInfo]  # most recently used first
    memory: MemoryInfo | None  # None while CUDA is not initialized
    precision: PrecisionInfo
    cuda: CudaInfo
    knobs: KnobState
    diagnosis: DiagnosisState
    flops: FlopCount | None  # the latest FLOP count of a sampled step; None: none yet
    host: HostSamples | None  # the stack sampler's counts; None: not sampling (GPUMON_HOOK_SAMPLE_HZ=0, no step yet)
    optimizers: list[OptimizerInfo]  # the optimizers seen stepping, first seen first (at most 8)
    empty_cache_sites: list[SyncSite]  # the lines that called torch.cuda.empty_cache() most, most first (at most 8)
    gc: GcTotals | None  # the collector's totals; None: not timed (the hook's GC timer is off)
    hook: HookInfo
    id: Any  # when it answers a get_state


class Pong(_Typed, total=False):
    """`pong`: the answer to `ping`."""

    id: Any
    t: float


class SubscribeOptions(TypedDict, total=False):
    """The stream options a subscription runs with, after clamping (in `subscribed`)."""

    steps: bool
    state: bool
    steps_interval: float
    state_interval: float


class Subscribed(_Typed, total=False):
    """`subscribed`: the answer to `subscribe`, with the options in effect."""

    id: Any
    options: SubscribeOptions  # the values in effect, after clamping


class _DiagnosingFields(_Typed):
    steps: int


class Diagnosing(_DiagnosingFields, total=False):
    """`diagnosing`: a diagnose request was accepted; a `diagnosis` follows after `steps` steps."""

    id: Any


class _DiagnosisFields(_Typed):
    available: bool  # False: could not count (reason says why); the other fields then absent


class Diagnosis(_DiagnosisFields, total=False):
    """`diagnosis`: a sync-count window's result: syncs per step and the lines that made them."""

    id: Any  # the `id` of the diagnose request that asked for it
    reason: str
    steps: int
    syncs_total: int
    syncs_per_step: list[int]
    sites: list[SyncSite]  # where the syncs were called from, most frequent first (at most 20)


class _KnobAckFields(_Typed):
    knobs: dict[str, Any]  # as accepted


class KnobAck(_KnobAckFields, total=False):
    """`knob_ack`: the reply to `set_knob`: the knobs accepted, when each applies, which loaders take them late."""

    id: Any
    applies: dict[str, str]  # name -> APPLIES_NEXT_STEP, APPLIES_NEXT_BATCH or APPLIES_NEXT_DATALOADER_ITER
    not_live: dict[str, str]  # DataLoader knob -> "not live: ..." where a loader takes it only at its next epoch


class _ProfilingFields(_Typed):
    steps: int


class Profiling(_ProfilingFields, total=False):
    """`profiling`: a profile request was accepted; the trace of `steps` steps goes to `path`."""

    id: Any
    path: str  # where the trace will be written


class _ProfileResultFields(_Typed):
    available: bool  # False: no trace (reason says why); the other fields then absent


class ProfileResult(_ProfileResultFields, total=False):
    """`profile_result`: the profiler trace written (or why not), with what capturing it cost."""

    id: Any  # the `id` of the profile request that asked for it
    reason: str
    path: str  # the trace: gzipped Chrome trace JSON (Perfetto, chrome://tracing), mode 0600
    steps: int  # steps captured
    bytes: int  # size of the .json.gz
    cuda: bool  # CUDA activity (kernels, copies) was captured, not only CPU ops
    stop_ms: float  # training-thread time spent stopping the profiler (CUDA: one synchronize)
    export_ms: float  # time writing the trace, on the hook's export thread


class _ErrorFields(_Typed):
    code: str
    message: str


class Error(_ErrorFields, total=False):
    """`error`: a request refused or failed: an error code (names.E_*) and a message."""

    id: Any


class Bye(_Typed, total=False):
    """`bye`: the job is exiting; EOF follows."""

    t: float
    last_seq: int
    reason: str  # "exit"


class PingRequest(_Typed, total=False):
    """`ping` request: answered by `pong`."""

    id: Any


class GetStateRequest(_Typed, total=False):
    """`get_state` request: answered by one `state`."""

    id: Any


class SubscribeRequest(_Typed, total=False):
    """`subscribe` request: stream `steps` and `state` messages at these intervals, with a backlog."""

    id: Any
    steps: bool  # stream `steps` (default true)
    state: bool  # stream `state` (default true)
    steps_interval: float  # seconds, clamped to [0.05, 5], default 0.2
    state_interval: float  # seconds, clamped to [0.25, 30], default 1
    backlog: int  # resend up to this many of the latest records now (0..BACKLOG_MAX)


class _DiagnoseRequestFields(_Typed):
    steps: int  # 1..DIAGNOSE_MAX_STEPS


class DiagnoseRequest(_DiagnoseRequestFields, total=False):
    """`diagnose` request: count the syncs of the next `steps` steps (answered by `diagnosis`)."""

    id: Any


class _ProfileRequestFields(_Typed):
    steps: int  # 1..PROFILE_MAX_STEPS


class ProfileRequest(_ProfileRequestFields, total=False):
    """`profile` request: torch.profiler over the next `steps` steps, the trace written into `dir`."""

    id: Any
    dir: str  # absolute path of a directory for the trace (created 0700, or ours with no group/other access)


class _SetKnobRequestFields(_Typed):
    knobs: dict[str, Any]


class SetKnobRequest(_SetKnobRequestFields, total=False):
    """`set_knob` request: apply these knobs at the next step boundary (answered by `knob_ack`)."""

    id: Any


Message = Mapping[str, Any]
