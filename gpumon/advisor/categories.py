"""The finding categories: one record each, with its headline, its advice and, where no knob fixes it, the code
change to show. The rules that find each one (and their thresholds) are in gpumon.advisor.rules; the knobs that
test each one in gpumon.advisor.catalogue."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Category:
    """One category of the vocabulary (docs/advisor.md)."""

    name: str
    headline: str
    advice: str
    code_change: str | None = None
    """The code change to show where no knob fixes it (None: experiments can test it)."""


INPUT_BOUND = "input_bound"
CPU_BOUND = "cpu_bound"
HOST_SYNC = "host_sync"
LAUNCH_BOUND = "launch_bound"
TRANSFER_BOUND = "transfer_bound"
LOW_PRECISION = "low_precision"
MEMORY_IMBALANCE = "memory_imbalance"
IO_BOUND = "io_bound"
THROTTLED = "throttled"
COMM_BOUND = "comm_bound"
STRAGGLER = "straggler"
GC_BOUND = "gc_bound"
ALLOCATOR_CHURN = "allocator_churn"
CPU_OPTIMIZER = "cpu_optimizer"
UNEXPLAINED_IDLE = "unexplained_idle"
HEALTHY = "healthy"

RECORDS = (
    Category(
        INPUT_BOUND,
        "Input-bound: the training loop waits for its data",
        "Load batches in parallel: more DataLoader workers, pinned memory, prefetching; move CPU "
        "preprocessing into Dataset.__getitem__ so the workers do it.",
    ),
    Category(
        CPU_BOUND,
        "CPU-bound: the training thread's own code keeps the GPU waiting",
        "Move that work where it belongs: tensor math on batches (conversion, normalisation, blurs, "
        "resizes) after .cuda(), where the GPU does it in microseconds; per-sample CPU work (decoding, "
        "augmentation) into Dataset.__getitem__, so the DataLoader's workers do it in parallel; Python "
        "bookkeeping out of the hot loop.",
    ),
    Category(
        HOST_SYNC,
        "Host syncs: the CPU waits for the GPU every step",
        "Remove per-step host syncs (.item(), .cpu(), print of a tensor, torch.cuda.synchronize) from "
        "the hot loop: log every N steps, keep metrics on the GPU.",
        "keep per-step metrics on the GPU and call .item() every N steps",
    ),
    Category(
        LAUNCH_BOUND,
        "Launch-bound: kernels too small to keep the GPU busy",
        "Give the GPU bigger pieces of work: a larger batch, fused layers, torch.compile or CUDA graphs.",
    ),
    Category(
        TRANSFER_BOUND,
        "Transfer-bound: host-to-device copies hold the GPU back",
        "Pin host memory (pin_memory=True) and copy with non_blocking=True; move less data (uint8 "
        "images, crop before the copy) or keep it on the GPU.",
    ),
    Category(
        LOW_PRECISION,
        "Low precision math: fp32 where tensor cores could run bf16/TF32",
        "Use tensor cores: torch.autocast with bfloat16, or at least TF32 for fp32 matmuls; "
        "channels_last for convolutions.",
    ),
    Category(
        MEMORY_IMBALANCE,
        "Memory imbalance: one GPU carries more than the others",
        "Replace nn.DataParallel with DistributedDataParallel (one process per GPU), so no GPU gathers "
        "the others' outputs.",
        "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])  # one "
        "process per GPU (torchrun), instead of nn.DataParallel",
    ),
    Category(
        IO_BOUND,
        "I/O-bound: data loading waits on storage",
        "Reads are the limit: more workers and prefetching to overlap them, persistent workers, faster "
        "or local storage, fewer and larger files, or caching the data set in memory.",
    ),
    Category(
        THROTTLED,
        "Throttled: the GPU slows its own clocks (heat or power)",
        "Nothing to change in the training script: the GPU lowers its clocks by itself. Check its "
        "cooling (airflow, fans, inlet temperature) and its power limit (nvidia-smi -q -d "
        "PERFORMANCE,POWER,TEMPERATURE; nvidia-smi -pl where allowed), or ask the machine's "
        "administrator.",
    ),
    Category(
        COMM_BOUND,
        "Comm-bound: NCCL communication is not hidden behind compute",
        "Overlap communication with compute: let DDP's gradient buckets all-reduce during backward "
        "(bucket_cap_mb, gradient_as_bucket_view=True, no .item() or sync inside backward), skip "
        "all-reduces with model.no_sync() on gradient-accumulation steps, give each GPU more work per "
        "step (a larger batch), compress gradients to bf16 with a DDP comm hook, and check that NCCL "
        "uses NVLink or InfiniBand (NCCL_DEBUG=INFO).",
        "model = DistributedDataParallel(model, device_ids=[local_rank], gradient_as_bucket_view=True)  "
        "# and `with model.no_sync():` on gradient-accumulation steps",
    ),
    Category(
        STRAGGLER,
        "Straggler: one rank holds the others back",
        "Fix that rank, not the job: its own budget says where its step goes. A data wait there means "
        "its node loads slower (fewer cores or workers, remote or slower storage, uneven shards: "
        "DistributedSampler with drop_last=True); GPU time means a slower or throttled GPU on that node "
        "(check its clocks and temperature); the others wait for it inside every all-reduce.",
    ),
    Category(
        GC_BOUND,
        "GC-bound: Python's garbage collector stops the training thread",
        "Make the collector's passes rare and short: gc.freeze() once the model, data and optimizer are set up (the "
        "objects made so far leave the collector's generations), fewer long-lived per-sample objects (keep running "
        "sums or tensors instead of a dict per sample), gc.set_threshold() higher, or gc.disable() during the epoch "
        "with gc.collect() between epochs.",
        "gc.freeze()  # after building the model, optimizer and data; or keep per-sample records as running sums",
    ),
    Category(
        ALLOCATOR_CHURN,
        "Allocator churn: CUDA memory is freed and allocated again every step",
        "Let PyTorch's caching allocator keep its memory: remove torch.cuda.empty_cache() from the loop (it frees "
        "every cached block, so the next step pays cudaMalloc again after a full drain of the GPU); against "
        "fragmentation use PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True instead.",
        "# torch.cuda.empty_cache()  # out of the training loop; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    ),
    Category(
        CPU_OPTIMIZER,
        "CPU optimizer: the optimizer runs on the CPU while the GPU waits",
        "Run the optimizer on the GPU: keep the parameters, their fp32 master copies and the optimizer's state on the "
        "device (model.cuda() before building the optimizer), so no gradient is copied down and no weight copied up "
        "each step; if memory is short, use a fused or 8-bit optimizer, or shard its state (ZeRO, FSDP).",
        "model.cuda(); optimizer = torch.optim.AdamW(model.parameters(), fused=True)  # state on the GPU",
    ),
    Category(
        UNEXPLAINED_IDLE,
        "GPU idle: the step model cannot say who owns the idle time",
        "The GPU idles, but neither the hook's samples nor its timers place that time: look at the lines listed; "
        "`gpumon diagnose --native --pid PID` sees C/C++ frames (syncs, allocator, launches inside extensions), and "
        "`gpumon diagnose --profile 10 --pid PID` captures the kernels and the gaps between them.",
    ),
    Category(
        HEALTHY,
        "Healthy: nothing big to fix",
        "The GPU is busy doing useful work; nothing big to fix.",
    ),
)
"""Every category, in the order of the vocabulary."""
BY_NAME = {record.name: record for record in RECORDS}
CATEGORIES = tuple(record.name for record in RECORDS)
HEADLINES = {record.name: record.headline for record in RECORDS}
ADVICE = {record.name: record.advice for record in RECORDS}
CODE_ONLY = {record.name: record.code_change for record in RECORDS if record.code_change is not None}
"""Findings no knob fixes, and the code change to show instead."""
