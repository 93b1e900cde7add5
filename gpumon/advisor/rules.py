"""The diagnosis: rules that name the dominant bottleneck of a job from its Signals, with evidence and a confidence.

Each rule looks for one category (docs/advisor.md) and, when its evidence is there, proposes a Candidate
with a severity (about the share of the job's time the problem costs, 0-1). The most severe, weighted by
confidence, is the finding; the others are its secondary findings. `healthy` is said only when no rule fires;
when the GPU is under-used yet no rule fires, the finding is still `healthy` but with a low confidence and
evidence that says nothing stood out: the advisor never invents a problem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpumon import units
from gpumon.advisor.categories import (
    ADVICE,
    COMM_BOUND,
    CPU_BOUND,
    HEADLINES,
    HEALTHY,
    HOST_SYNC,
    INPUT_BOUND,
    IO_BOUND,
    LAUNCH_BOUND,
    LOW_PRECISION,
    MEMORY_IMBALANCE,
    STRAGGLER,
    THROTTLED,
    TRANSFER_BOUND,
)
from gpumon.advisor.peak_flops import FP32, TF32, gpu_peaks
from gpumon.advisor.signals import SATURATED_CPU, SOURCE_HOOK, SOURCE_PYSPY, GpuSignals, Signals
from gpumon.jobs.jobstate import STRAGGLER_THRESHOLD
from gpumon.jobs.pyspy_categories import COMM as COMM_SAMPLES
from gpumon.jobs.pyspy_categories import SYNC_NATIVE, SYNC_SOURCE
from gpumon.jobs.pyspy_categories import USER_CODE as USER_CODE_SAMPLES
from gpumon.jobs.step_model import sync_cost

HEALTHY_ADVICE_UNDER_USED = (
    "No bottleneck stood out in this window though the GPU is not fully busy: watch a longer "
    "window, or run the job with the hook (gpumon run / attach) for step timings."
)
PYSPY_BLIND = (
    "py-spy sees only Python frames: a sync inside C++ (.item(), `if loss < best:`) or a kernel launch reads as "
    "the line that calls it; `gpumon diagnose --native --pid PID` unwinds C/C++, `gpumon run` measures the step"
)
HEALTHY_ADVICE_CPU = (
    "The job computes on the CPU, so nothing here holds a GPU back; to train faster, move the model "
    "and its batches to a GPU (.to('cuda'))."
)
HEALTHY_ADVICE_NO_GPU_FIGURES = "Nothing big to fix in the steps the hook measured (no GPU figures to judge by)."
HEALTHY_ADVICE_NO_DATA = "Not enough data yet: let the job run some steps, then look again."

# Thresholds (percent figures are 0-100 as NVML gives them; shares are 0-1).
DATA_SHARE_INPUT = 0.20
"""Waiting for data this share of each step (or more) makes the job input-bound."""
PYSPY_DATA_SHARE = 0.20
IOWAIT_IO = 10.0
DISK_WAIT_IO = 0.30
READ_IO = 20e6
"""Bytes/s the job reads from storage beyond which loaders that are not CPU-bound are waiting on I/O."""
LOADER_CPU_IO = 60.0
SYNCS_PER_STEP = 1.0
MANY_SYNCS = 3.0
PYSPY_SYNC_SHARE = 0.15
UNEXPLAINED_IDLE = 0.15
LAUNCH_SM = 20.0
LAUNCH_SM_TO_UTIL = 0.35
LAUNCH_STEPS_PER_S = 100.0
LAUNCH_MAIN_SHARE = 0.5
"""Under 10% GPU-Util, launch_bound needs the main thread launching (torch's model, autograd, optimizer) this share
of the time."""
PCIE_TRANSFER = 3e9
"""Bytes/s host<->device beyond which copies are a likely bottleneck of an under-used GPU (an H100 training job
with 4 pinned workers moved 1.1 GB/s at 43% GPU-Util without being copy-bound)."""
PCIE_TRANSFER_PAGEABLE = 1e9
"""The same when the hook shows pageable copies (pin_memory off), which run at a fraction of the link's speed."""
TRANSFER_UTIL = 70.0
BUSY_UTIL = 80.0
BUSY_SM = 40.0
TENSOR_LOW = 10.0
IMBALANCE_RATIO = 1.3
IMBALANCE_BYTES = 1 << 30
THROTTLE_SHARE = 0.2
"""Throttled this share of the window (or more) is worth a look."""
GPU_BOUND_SHARE = 0.6
"""The hook's GPU share of each step at or above which the job is GPU-bound."""
POWER_LIMIT_LOWERED_W = 1.0
"""A power limit this many watts or more below the card's default was lowered: nvidia-smi -pl sets whole watts, and
NVML gives both limits in mW, so a limit left at its default reads within a watt of it."""
UNKNOWN_CLOCK_LOSS = 0.25
"""The clock lost while throttled, assumed where the SM clock or its maximum is unknown."""
MIN_SEVERITY = 0.15
"""A candidate costing less than this share of the time is not worth naming."""
PYSPY_CONFIDENCE = 0.7
"""Confidence factor for figures estimated from py-spy samples rather than measured by the hook."""
SOURCE_LINE_CONFIDENCE = 0.5
"""The py-spy sync confidence where the syncs were only read from source lines (without --native)."""
COMM_EXPOSED_SHARE = 0.15
"""Exposed NCCL time (no compute kernel beside it) at or above this share of the captured step time makes the job
comm-bound: the same bar as MIN_SEVERITY, since the share is what the job would gain with full overlap."""
CPU_BOUND_SHARE = MIN_SEVERITY
"""GPU idle this share of the time (or more) while the training thread runs its own code makes the job CPU-bound:
the share is what moving that code off the training thread's path gives at most."""
STEP_MODEL_CONFIDENCE = 0.85
"""The step model with GPU busy from GPU-Util and the idle time split by the hook's samples: measured; not 1, a
sample is a sample."""
STREAM_STEP_MODEL_CONFIDENCE = 0.7
"""The same with GPU busy from the training stream's state at the samples (no NVML), which reads idler than it is
under launch-heavy loads (jobs.step_model)."""
COMM_CONFIDENCE = 0.85
"""Measured from the job's own kernel timeline, so high; not 1: the capture covers only a few steps."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis: a category of the vocabulary, its evidence in one line, the numbers behind it."""

    category: str
    evidence: str
    confidence: float
    severity: float = 0.0
    numbers: Mapping[str, Any] = field(default_factory=dict)
    secondary: tuple[Finding, ...] = ()
    source: str = ""
    advice_text: str = ""
    """What to do where the category's general ADVICE would not fit the evidence (a healthy job on the CPU...)."""

    @property
    def headline(self) -> str:
        return HEADLINES[self.category]

    @property
    def advice(self) -> str:
        return self.advice_text or ADVICE[self.category]

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "headline": self.headline,
            "evidence": self.evidence,
            "confidence": round(self.confidence, 2),
            "severity": round(self.severity, 3),
            "numbers": dict(self.numbers),
            "advice": self.advice,
            "source": self.source,
            "secondary": [finding.to_dict() for finding in self.secondary],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            category=str(data["category"]),
            evidence=str(data.get("evidence", "")),
            confidence=float(data.get("confidence", 0.0)),
            severity=float(data.get("severity", 0.0)),
            numbers=dict(data.get("numbers") or {}),
            source=str(data.get("source", "")),
            secondary=tuple(cls.from_dict(d) for d in data.get("secondary") or ()),
            advice_text=_own_advice(str(data["category"]), data.get("advice")),
        )


def _own_advice(category: str, advice: object) -> str:
    """The advice a serialized finding carries, where it is not its category's general one."""
    return advice if isinstance(advice, str) and advice != ADVICE.get(category) else ""


# ---------------------------------------------------------------------------------------------
# Formatting evidence.


def pct(share: float | None) -> str:
    """A 0-1 share as a whole percent."""
    return units.share(share, missing="?")


def pct100(value: float | None) -> str:
    """A 0-100 figure as a percent (one decimal under 10)."""
    return units.percent(value, fine=True, missing="?")


def rate(bytes_per_s: float | None) -> str:
    """Bytes per second in decimal units: '1.1 GB/s'."""
    return units.rate(bytes_per_s, missing="?")


def gib(value: float | None) -> str:
    """Bytes in binary units: '1.5 GiB'."""
    return units.size(value, missing="?")


def _join(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def _round(value: Any, digits: int = 3) -> Any:
    return round(value, digits) if isinstance(value, float) else value


# ---------------------------------------------------------------------------------------------
# The rules.


@dataclass(frozen=True, slots=True)
class Candidate:
    category: str
    severity: float
    confidence: float
    evidence: str
    numbers: Mapping[str, Any]


def _source_factor(signals: Signals) -> float:
    return PYSPY_CONFIDENCE if signals.source == SOURCE_PYSPY else 1.0


def _gpu_part(signals: Signals) -> str | None:
    if signals.gpu_util is None:
        return None
    text = f"GPU-Util {pct100(signals.gpu_util)}"
    if signals.sm_activity is not None:
        text += f", SM activity {pct100(signals.sm_activity)}"
    return text


def _cores_part(signals: Signals) -> str | None:
    if signals.idle_cores is None or signals.cores is None:
        return None
    return f"{signals.idle_cores} of {signals.cores} cores idle"


def _loader_cpu(signals: Signals) -> tuple[float | None, str | None]:
    """The CPU of whatever loads the data (the workers, else the main process) and how to say it."""
    workers = signals.worker_cpu
    if signals.num_workers == 0 or (signals.num_workers is None and not workers):
        if signals.main_cpu is None:
            return None, "no DataLoader workers" if signals.num_workers == 0 else None
        return signals.main_cpu, f"no DataLoader workers: the main process loads at {pct100(signals.main_cpu)} CPU"
    if not workers:
        count = signals.num_workers
        return None, f"{count} DataLoader worker{'s' if count != 1 else ''}" if count else None
    mean = sum(workers) / len(workers)
    count = len(workers)
    return mean, f"{count} worker{'s' if count != 1 else ''} at {pct100(mean)} CPU{' each' if count > 1 else ''}"


def rule_data(signals: Signals) -> Candidate | None:
    """input_bound, or io_bound when the loaders wait on storage rather than compute."""
    if signals.source == SOURCE_PYSPY:
        data = signals.pyspy.get("data_wait")
        if data is None or data < PYSPY_DATA_SHARE:
            return None
        wait_text = f"main thread waits on the DataLoader in {pct(data)} of py-spy samples"
    else:
        data = signals.data_share
        if data is None or data < DATA_SHARE_INPUT:
            return None
        wait_text = f"waits for data {pct(data)} of each step"
    loader_cpu, loader_text = _loader_cpu(signals)
    reads = signals.job_read_bytes_per_s
    io_signs = [
        signals.iowait is not None and signals.iowait >= IOWAIT_IO,
        signals.workers_in_disk_wait is not None and signals.workers_in_disk_wait >= DISK_WAIT_IO,
        reads is not None and reads >= READ_IO,
    ]
    loaders_not_busy = loader_cpu is not None and loader_cpu < LOADER_CPU_IO
    numbers = {
        "data_share": _round(data),
        "loader_cpu": _round(loader_cpu),
        "num_workers": signals.num_workers,
        "idle_cores": signals.idle_cores,
        "cores": signals.cores,
        "gpu_util": _round(signals.gpu_util),
    }
    confidence = (0.9 if data >= 0.4 else 0.75) * _source_factor(signals)
    if any(io_signs) and (loaders_not_busy or loader_cpu is None):
        io_parts = []
        if reads is not None and reads > 0:
            io_parts.append(f"reads {rate(reads)} from disk")
        if signals.iowait is not None and signals.iowait >= 1:
            io_parts.append(f"iowait {pct100(signals.iowait)}")
        if signals.workers_in_disk_wait:
            io_parts.append(f"loaders in disk wait {pct(signals.workers_in_disk_wait)} of the time")
        numbers.update(
            iowait=_round(signals.iowait),
            job_read_bytes_per_s=_round(reads, 0),
            workers_in_disk_wait=_round(signals.workers_in_disk_wait),
        )
        evidence = _join(wait_text, ", ".join(io_parts), loader_text)
        return Candidate(IO_BOUND, data, confidence * (1.0 if sum(io_signs) >= 2 else 0.8), evidence, numbers)
    collate_text = None
    if signals.data_collate_share is not None and signals.data_collate_share >= 0.05:
        collate_text = f"the main process's collate_fn takes {pct(signals.data_collate_share)} of each step"
        numbers.update(
            data_collate_share=_round(signals.data_collate_share), data_worker_share=_round(signals.data_worker_share)
        )
    evidence = _join(wait_text, collate_text, loader_text, _cores_part(signals), _gpu_part(signals))
    return Candidate(INPUT_BOUND, data, confidence, evidence, numbers)


def _idle_share(signals: Signals) -> float | None:
    """Share of the time the GPU does nothing, from NVML (GPU-Util)."""
    if signals.gpu_util is None:
        return None
    return max(0.0, 1.0 - signals.gpu_util / 100.0)


def rule_host_sync(signals: Signals) -> Candidate | None:
    if not signals.has_gpu:
        return None
    idle = _idle_share(signals)
    data = signals.data_share or 0.0
    if signals.source == SOURCE_PYSPY:
        waiting = signals.pyspy.get("cuda_sync")
        if waiting is None or waiting < PYSPY_SYNC_SHARE:
            return None
        # The syncs' cost is the GPU idle they cause, not the host's wait in them: what the step would lose without
        # them, max(host time outside syncs, GPU busy) (jobs.step_model), where GPU-Util says how busy the GPU is.
        share = waiting if signals.gpu_util is None else sync_cost(waiting, signals.gpu_util / 100.0)
        evidence_counts = signals.pyspy_sync_evidence
        seen = sum(evidence_counts.values())
        from_source = evidence_counts.get(SYNC_SOURCE, 0)
        how = None
        confidence = 0.6 * PYSPY_CONFIDENCE
        if seen and evidence_counts.get(SYNC_NATIVE, 0) >= seen / 2:
            how = "seen in CUDA's own wait functions (py-spy --native)"
            confidence = 0.75 * PYSPY_CONFIDENCE
        elif seen and from_source >= seen / 2:
            how = "read from the source line (.item(), .cpu()...): C++ frames are not sampled"
            confidence = SOURCE_LINE_CONFIDENCE * PYSPY_CONFIDENCE
        evidence = _join(
            f"main thread in a CUDA sync in {pct(waiting)} of py-spy samples",
            f"the GPU idles {pct(share)} of the time because of them" if signals.gpu_util is not None else None,
            how,
            _gpu_part(signals),
        )
        return Candidate(
            HOST_SYNC,
            share,
            confidence,
            evidence,
            {
                "pyspy_cuda_sync": _round(waiting),
                "sync_cost": _round(share),
                "gpu_util": _round(signals.gpu_util),
                "sync_evidence": dict(evidence_counts),
            },
        )
    if signals.step_shares:
        return _step_model_sync(signals)
    syncs = signals.syncs_per_step
    if syncs is None and signals.budget_syncs_per_step:
        syncs = signals.budget_syncs_per_step
    if syncs is None or syncs < SYNCS_PER_STEP or idle is None:
        return None
    unexplained = max(0.0, idle - data - (signals.h2d_share or 0.0))
    if unexplained < UNEXPLAINED_IDLE:
        return None
    severity = unexplained * (1.0 if syncs >= MANY_SYNCS else 0.6)
    site = f" (most at {signals.sync_sites[0]})" if signals.sync_sites else ""
    wait = None
    if signals.sync_wait_share is not None:
        wait = f"the host waits in them {pct(signals.sync_wait_share)} of each step"
    evidence = _join(
        f"{syncs:.0f} host-device sync{'s' if round(syncs) != 1 else ''} per step{site}",
        wait,
        f"GPU idle {pct(idle)} of the time",
        _gpu_part(signals),
    )
    numbers = {
        "syncs_per_step": _round(syncs),
        "gpu_idle": _round(idle),
        "data_share": _round(data),
        "sync_sites": list(signals.sync_sites[:3]),
    }
    return Candidate(HOST_SYNC, severity, 0.8 if syncs >= MANY_SYNCS else 0.6, evidence, numbers)


def _step_model_sync(signals: Signals) -> Candidate | None:
    """host_sync from the step model: the GPU idle that syncs cause (drained at each sync, waiting until the host
    launches again) and the idle while the host waits in one; what removing the syncs would give back."""
    after, inside = signals.step_shares.get("sync_idle", 0.0), signals.step_shares.get("sync_wait", 0.0)
    share = after + inside
    if share < MIN_SEVERITY:
        return None
    syncs = signals.syncs_per_step if signals.syncs_per_step is not None else signals.budget_syncs_per_step
    sync_lines = [
        where for where, kind in zip(signals.idle_lines, signals.idle_line_activities, strict=False) if kind == "sync"
    ] or list(signals.sync_sites[:1])
    evidence = _join(
        f"the GPU idles {pct(share)} of the time because of host syncs ({pct(after)} after them until new work "
        "arrives" + (f", {pct(inside)} inside them" if inside >= 0.01 else "") + ")",
        f"{syncs:.0f} sync{'s' if round(syncs) != 1 else ''} per step" if syncs else None,
        f"at {sync_lines[0]}" if sync_lines else None,
        f"the host waits in them {pct(signals.sync_wait_share)} of each step"
        if signals.sync_wait_share is not None
        else None,
    )
    numbers = {
        "sync_idle": _round(after),
        "sync_wait_idle": _round(inside),
        "syncs_per_step": _round(syncs),
        "sync_wait_share": _round(signals.sync_wait_share),
        "sync_sites": list(signals.sync_sites[:3]),
        "busy_from": signals.step_busy_from,
    }
    return Candidate(HOST_SYNC, share, _step_model_confidence(signals), evidence, numbers)


def rule_launch(signals: Signals) -> Candidate | None:
    if not signals.has_gpu or signals.gpu_util is None:
        return None
    if (signals.data_share or 0.0) >= DATA_SHARE_INPUT or (signals.syncs_per_step or 0.0) >= MANY_SYNCS:
        return None
    if (signals.pcie_rx or 0.0) + (signals.pcie_tx or 0.0) >= PCIE_TRANSFER:
        return None  # the GPU waits on copies (transfer_bound), not on kernel launches
    util, sm = signals.gpu_util, signals.sm_activity
    steps = signals.steps_per_s
    per_step = signals.samples_per_step
    step_text = None
    if steps is not None:
        step_text = f"{steps:.0f} steps/s" + (f" of {per_step:.0f} samples" if per_step else "")
    main_text = f"main process at {pct100(signals.main_cpu)} CPU" if signals.main_cpu is not None else None
    numbers = {
        "gpu_util": _round(util),
        "sm_activity": _round(sm),
        "steps_per_s": _round(steps),
        "samples_per_step": _round(per_step),
        "main_cpu": _round(signals.main_cpu),
    }
    if sm is not None:
        # Under 10% GPU-Util the GPU may simply have no work; the main thread launching most of the time (py-spy's
        # forward/backward/optimizer samples, or the step model's idle while torch dispatches) says it does.
        if signals.source == SOURCE_PYSPY:
            launching = sum(signals.pyspy.get(phase, 0.0) for phase in ("forward", "backward", "optimizer"))
        else:
            launching = signals.step_shares.get("launch", 0.0)
        if sm >= LAUNCH_SM or (util < 10 and launching < LAUNCH_MAIN_SHARE) or sm / max(util, 1e-9) > LAUNCH_SM_TO_UTIL:
            return None
        evidence = _join(
            f"GPU-Util {pct100(util)} but SM activity {pct100(sm)}: the kernels are tiny", step_text, main_text
        )
        confidence = 0.8 if signals.main_cpu is None or signals.main_cpu >= SATURATED_CPU else 0.65
        return Candidate(LAUNCH_BOUND, 1.0 - sm / 100.0, confidence * _source_factor(signals), evidence, numbers)
    # Without GPM: many small steps, a GPU far from busy and a CPU-bound main process.
    if steps is None or steps < LAUNCH_STEPS_PER_S or util >= 60:
        return None
    if signals.main_cpu is not None and signals.main_cpu < SATURATED_CPU:
        return None
    evidence = _join(f"{step_text} with GPU-Util {pct100(util)} (no SM activity figures on this GPU)", main_text)
    return Candidate(LAUNCH_BOUND, (1.0 - util / 100.0) * 0.8, 0.4 * _source_factor(signals), evidence, numbers)


def _budget_transfer(signals: Signals) -> Candidate | None:
    """transfer_bound from the hook's step budget: the host's time in host->device copies is their cost."""
    share = signals.h2d_share or 0.0
    pageable = signals.h2d_pageable
    copied = signals.h2d_bytes_per_step or 0.0
    where = None
    if pageable is not None:
        where = (
            f"{pct(pageable)} from pageable memory (pin_memory off: synchronous copies)"
            if pageable >= 0.5
            else f"{pct(1.0 - pageable)} from pinned memory"
        )
    evidence = _join(
        f"host->device copies take {pct(share)} of each step",
        f"{gib(copied)} per step at {rate(signals.h2d_rate)}",
        where,
        _gpu_part(signals),
    )
    numbers = {
        "h2d_share": _round(share),
        "h2d_bytes_per_step": _round(copied, 0),
        "h2d_rate": _round(signals.h2d_rate, 0),
        "h2d_pageable": _round(pageable),
        "pin_memory": signals.pin_memory,
        "gpu_util": _round(signals.gpu_util),
    }
    confidence = 0.85 if pageable is not None and pageable >= 0.5 else 0.7
    return Candidate(TRANSFER_BOUND, share, confidence, evidence, numbers)


def rule_transfer(signals: Signals) -> Candidate | None:
    """transfer_bound: from the step budget where the hook measured one, else from PCIe traffic of an idle GPU."""
    if not signals.has_gpu:
        return None
    if signals.budget_steps and signals.h2d_share is not None:
        return _budget_transfer(signals)
    if signals.gpu_util is None:
        return None
    traffic = (signals.pcie_rx or 0.0) + (signals.pcie_tx or 0.0)
    if signals.pcie_rx is None and signals.pcie_tx is None:
        return None
    threshold = PCIE_TRANSFER_PAGEABLE if signals.pin_memory is False else PCIE_TRANSFER
    if traffic < threshold or signals.gpu_util >= TRANSFER_UTIL:
        return None
    # The idle time the data wait does not explain is what the copies can cost (both can share a step).
    severity = min((1.0 - signals.gpu_util / 100.0) * 0.9, max(0.0, 1.0 - (signals.data_share or 0.0)))
    direction = "host->device" if (signals.pcie_rx or 0.0) >= (signals.pcie_tx or 0.0) else "device->host"
    pinned = None
    if signals.pin_memory is False:
        pinned = "pin_memory off (pageable copies)"
    evidence = _join(
        f"PCIe {direction} {rate(traffic)} while GPU-Util is {pct100(signals.gpu_util)}",
        pinned,
        f"SM activity {pct100(signals.sm_activity)}" if signals.sm_activity is not None else None,
    )
    numbers = {
        "pcie_rx": _round(signals.pcie_rx, 0),
        "pcie_tx": _round(signals.pcie_tx, 0),
        "gpu_util": _round(signals.gpu_util),
        "pin_memory": signals.pin_memory,
    }
    confidence = (0.8 if signals.pin_memory is False else 0.65) * _source_factor(signals)
    return Candidate(TRANSFER_BOUND, severity, confidence, evidence, numbers)


def _reduced_precision(signals: Signals) -> bool | None:
    """True when the job uses bf16/fp16 autocast or TF32 matmuls; None when nothing says."""
    if signals.autocast:
        return True
    if signals.tf32_matmul or signals.float32_matmul_precision in ("high", "medium"):
        return True
    if signals.autocast is None and signals.tf32_matmul is None:
        return None
    return False


def precision_flags(signals: Signals) -> str:
    """The job's precision settings, each as it is: 'no autocast, TF32 off for matmuls, on for cuDNN convolutions'."""
    parts = []
    if signals.autocast is False:
        parts.append("no autocast")
    matmul = signals.tf32_matmul or signals.float32_matmul_precision in ("high", "medium")
    matmul_known = signals.tf32_matmul is not None or signals.float32_matmul_precision is not None
    cudnn = signals.tf32_cudnn
    if matmul_known and cudnn is not None and bool(matmul) == cudnn:
        parts.append(f"TF32 {'on' if cudnn else 'off'}")
    else:
        if matmul_known:
            parts.append(f"TF32 {'on' if matmul else 'off'} for matmuls")
        if cudnn is not None:
            parts.append(
                f"{'on' if cudnn else 'off'} for cuDNN convolutions"
                if matmul_known
                else f"TF32 {'on' if cudnn else 'off'} for cuDNN convolutions"
            )
    return ", ".join(parts)


def gpu_busy(signals: Signals) -> bool:
    util, sm = signals.gpu_util, signals.sm_activity
    return util is not None and util >= BUSY_UTIL and (sm is None or sm >= BUSY_SM)


PRECISION_SEVERITY_UNKNOWN = 0.5
"""The share low precision costs where the GPU's peaks are not known (a GPU outside peak_flops' table)."""


def _precision_gain(signals: Signals) -> tuple[float, str | None]:
    """(severity, its reason): the GPU's busy time, were it all matmul math now at fp32 (or TF32), would run at the
    bf16 tensor-core peak instead: it shrinks by the ratio of the two dense peaks (H200: fp32 67, bf16 989 TFLOP/s,
    so a fully busy fp32 job can gain up to 93%). An upper bound: elementwise kernels gain less."""
    peaks = gpu_peaks(signals.gpus[0].name) if signals.gpus else None
    busy = signals.step_shares.get("gpu_busy")
    if busy is None and signals.gpu_util is not None:
        busy = signals.gpu_util / 100.0
    if peaks is None or not busy:
        return PRECISION_SEVERITY_UNKNOWN, None
    current = TF32 if signals.tf32_matmul or signals.float32_matmul_precision in ("high", "medium") else FP32
    ratio = peaks.tflops(current) / peaks.bf16
    share = busy * (1.0 - ratio)
    return (
        share,
        f"bf16 could run the GPU's busy {pct(busy)} at up to {1 / ratio:.0f}x the {current} peak ({peaks.model})",
    )


def rule_precision(signals: Signals) -> Candidate | None:
    if not signals.has_gpu or not gpu_busy(signals):
        return None
    reduced = _reduced_precision(signals)
    tensor = signals.tensor_activity
    if tensor is not None:
        if tensor >= TENSOR_LOW or reduced is True:
            return None
        flags = f"fp32 math ({precision_flags(signals)})" if reduced is False else "no reduced-precision math seen"
        severity, gain = _precision_gain(signals)
        evidence = _join(f"GPU-Util {pct100(signals.gpu_util)} but tensor-core activity {pct100(tensor)}", flags, gain)
        confidence = (0.85 if reduced is False else 0.6) * _source_factor(signals)
    else:
        if reduced is not False:
            return None
        evidence = _join(
            f"GPU-Util {pct100(signals.gpu_util)} with fp32 math ({precision_flags(signals)})",
            "no tensor-core figures on this GPU",
        )
        confidence = 0.45
        severity = 0.35
    numbers = {
        "gpu_util": _round(signals.gpu_util),
        "sm_activity": _round(signals.sm_activity),
        "tensor_activity": _round(tensor),
        "autocast": signals.autocast,
        "tf32_matmul": signals.tf32_matmul,
        "tf32_cudnn": signals.tf32_cudnn,
    }
    return Candidate(LOW_PRECISION, severity, confidence, evidence, numbers)


def rule_memory_imbalance(signals: Signals) -> Candidate | None:
    gpus = [g for g in signals.gpus if g.memory_used is not None]
    if len(gpus) < 2:
        return None
    heaviest = max(gpus, key=lambda g: g.memory_used or 0.0)
    others = [g for g in gpus if g is not heaviest]
    lightest = min(others, key=lambda g: g.memory_used or 0.0)
    top, low = heaviest.memory_used or 0.0, lightest.memory_used or 0.0
    if top - low < IMBALANCE_BYTES or (low > 0 and top / low < IMBALANCE_RATIO):
        return None
    mean_others = sum(g.memory_used or 0.0 for g in others) / len(others)
    util_text = None
    if heaviest.utilization is not None and lightest.utilization is not None:
        util_text = f"GPU-Util {pct100(heaviest.utilization)} vs {pct100(lightest.utilization)}"
    ratio = top / low if low > 0 else None
    evidence = _join(
        f"GPU {heaviest.index} holds {gib(top)}, the other {len(others)} GPU{'s' if len(others) > 1 else ''} "
        f"{gib(mean_others)} on average" + (f" ({ratio:.1f}x)" if ratio else ""),
        util_text,
        "nn.DataParallel gathers on one GPU" if len(gpus) >= 2 else None,
    )
    numbers = {
        "memory_used": {str(g.index): _round(g.memory_used, 0) for g in gpus},
        "gpu_util": {str(g.index): _round(g.utilization) for g in gpus},
    }
    severity = max(0.2, (top - low) / top)
    confidence = 0.8 if signals.source == SOURCE_HOOK else 0.6
    return Candidate(MEMORY_IMBALANCE, severity, confidence, evidence, numbers)


def gpu_bound(signals: Signals) -> bool:
    """The GPU is what limits the job: busy by NVML, or covering most of each step by the hook's CUDA events."""
    return gpu_busy(signals) or (signals.gpu_share is not None and signals.gpu_share >= GPU_BOUND_SHARE)


_THROTTLE_KINDS = (("thermal", "thermal slowdown"), ("power", "power cap"), ("slowdown", "hardware clock slowdown"))


def power_limit_lowered(gpu: GpuSignals) -> bool | None:
    """Whether the GPU's power limit is set below the card's default (None where either limit is unknown)."""
    if gpu.power_limit is None or gpu.power_limit_default is None:
        return None
    return gpu.power_limit <= gpu.power_limit_default - POWER_LIMIT_LOWERED_W


def _worst_throttle(gpu: GpuSignals) -> tuple[str, str, float]:
    """(kind, how to say it, share of the window) of the GPU's most frequent kind of throttling that costs clocks it
    should have: heat, a hardware slowdown, or a power limit set below the card's default. A card held at its default
    limit (or at a limit not known to be lowered) runs as built: that is evidence of a busy GPU, not a problem."""
    power = gpu.throttle_power if power_limit_lowered(gpu) else None
    shares = {"thermal": gpu.throttle_thermal, "power": power, "slowdown": gpu.throttle_slowdown}
    kind, text = max(_THROTTLE_KINDS, key=lambda pair: shares[pair[0]] or 0.0)
    return kind, text, shares[kind] or 0.0


def _watts(gpu: GpuSignals) -> str:
    """ "693 of 700 W", or the limit alone where the draw is unknown."""
    limit = f"{gpu.power_limit:.0f} W" if gpu.power_limit is not None else "? W"
    return f"{gpu.power:.0f} of {limit}" if gpu.power is not None else limit


def power_limit_lines(signals: Signals) -> list[str]:
    """Evidence lines for the job's GPUs held at a power limit that is not lowered, which rule_throttled leaves out:
    e.g. "at its power limit (693 of 700 W, the card's default) 100% of the window"."""
    lines = []
    for gpu in signals.gpus:
        share = gpu.throttle_power
        if share is None or share < THROTTLE_SHARE:
            continue
        lowered = power_limit_lowered(gpu)
        if lowered:
            continue
        where = f"GPU {gpu.index} " if len(signals.gpus) > 1 else ""
        if lowered is None:
            why = "; the card's default limit is unknown, so not counted as throttling"
        elif (
            gpu.power_limit_default is not None
            and gpu.power_limit is not None
            and gpu.power_limit > gpu.power_limit_default
        ):
            why = f", raised from the card's default {gpu.power_limit_default:.0f} W"
        else:
            why = ", the card's default"
        lines.append(f"{where}at its power limit ({_watts(gpu)}{why}) {pct(share)} of the window")
    return lines


def rule_throttled(signals: Signals) -> Candidate | None:
    """throttled: a GPU-bound job whose GPU lowers its clocks (thermal, power or hardware slowdown)."""
    if not signals.has_gpu or not gpu_bound(signals):
        return None
    throttled = [(gpu, *_worst_throttle(gpu)) for gpu in signals.gpus]
    throttled = [entry for entry in throttled if entry[3] >= THROTTLE_SHARE]
    if not throttled:
        return None
    gpu, kind, text, share = max(throttled, key=lambda entry: entry[3])
    clock, top = gpu.throttled_clock_sm, gpu.clock_sm_max
    loss = max(0.0, 1.0 - clock / top) if clock is not None and top else None
    detail = None
    if kind == "thermal" and gpu.throttled_temperature is not None:
        detail = f" at {gpu.throttled_temperature:.0f} C"
    elif kind == "power" and gpu.power_limit_default is not None:
        detail = f" at {_watts(gpu)}, lowered from the card's default {gpu.power_limit_default:.0f} W"
    where = f"GPU {gpu.index}: " if len(signals.gpus) > 1 else ""
    clock_text = f"SM clock {clock:.0f} of {top:.0f} MHz" if clock is not None and top else None
    evidence = _join(f"{where}{text} {pct(share)} of the window{detail or ''}", clock_text, _gpu_part(signals))
    numbers = {
        "gpu": gpu.index,
        "reason": kind,
        "share": _round(share),
        "clock_sm": _round(clock),
        "clock_sm_max": _round(top),
        "temperature": _round(gpu.throttled_temperature),
        "power": _round(gpu.power),
        "power_limit": _round(gpu.power_limit),
        "power_limit_default": _round(gpu.power_limit_default),
        "gpu_util": _round(signals.gpu_util),
        "gpu_share": _round(signals.gpu_share),
    }
    severity = share * (loss if loss is not None else UNKNOWN_CLOCK_LOSS)
    return Candidate(THROTTLED, severity, 0.8 if loss is not None else 0.5, evidence, numbers)


def rule_comm(signals: Signals) -> Candidate | None:
    """comm_bound, from a profiler capture (NCCL kernel time with no compute kernel beside it, per step), else from
    the collectives the hook timed live (the training stream's wait in them)."""
    if signals.source == SOURCE_PYSPY:
        return _pyspy_comm(signals)
    exposed = signals.comm_exposed_ms_per_step
    # The profiler's own host work stretches the captured steps, not NCCL's kernels: the exposed time is a share of
    # the step as the hook timed it live, where it did.
    step_ms = signals.step_ms or signals.capture_step_ms
    if exposed is None or not step_ms:
        return _live_comm(signals)
    share = min(1.0, exposed / step_ms)
    if share < COMM_EXPOSED_SHARE:
        return None
    captured_ms = signals.capture_step_ms
    stretched = (
        f" (each {units.milliseconds(captured_ms)} under the profiler)" if captured_ms not in (None, step_ms) else ""
    )
    evidence = _join(
        f"NCCL exposed {units.milliseconds(exposed)} of each {units.milliseconds(step_ms)} step ({pct(share)})",
        f"{pct(signals.comm_overlap_share)} of the NCCL time ({units.milliseconds(signals.comm_ms_per_step)} "
        "a step) overlaps compute",
        f"profiler capture of {signals.capture_steps} steps{stretched}" if signals.capture_steps else None,
    )
    numbers = {
        "comm_exposed_share": _round(share),
        "comm_exposed_ms_per_step": _round(exposed),
        "comm_ms_per_step": _round(signals.comm_ms_per_step),
        "comm_overlap_share": _round(signals.comm_overlap_share),
        "step_ms": _round(step_ms),
        "capture_steps": signals.capture_steps,
    }
    return Candidate(COMM_BOUND, share, COMM_CONFIDENCE, evidence, numbers)


LIVE_COMM_CONFIDENCE = 0.75
"""Timed by events around the job's own torch.distributed calls on GPU-timed steps: measured, but blind to DDP's
all-reduces inside backward (a capture sees those)."""


def _live_comm(signals: Signals) -> Candidate | None:
    share = signals.comm_live_share
    if share is None or share < COMM_EXPOSED_SHARE:
        return None
    per_step = signals.comm_live_ms_per_step
    evidence = _join(
        f"the training stream waits in torch.distributed collectives {pct(share)} of each step"
        + (f" ({units.milliseconds(per_step)} a step)" if per_step is not None else ""),
        "nothing overlaps them: each blocks the stream until NCCL is done",
        f"timed live on {signals.comm_live_steps} steps" if signals.comm_live_steps else None,
    )
    numbers = {
        "comm_live_share": _round(share),
        "comm_live_ms_per_step": _round(per_step),
        "comm_live_steps": signals.comm_live_steps,
        "step_ms": _round(signals.step_ms),
    }
    return Candidate(COMM_BOUND, share, LIVE_COMM_CONFIDENCE, evidence, numbers)


PYSPY_COMM_CONFIDENCE = 0.6 * PYSPY_CONFIDENCE
"""The host's time in collectives, read from py-spy samples: a collective the training thread waits in holds the
step; how much of NCCL's time the GPU overlaps with compute, py-spy cannot see."""


def _pyspy_comm(signals: Signals) -> Candidate | None:
    """comm_bound without the hook: the training thread's samples inside torch.distributed calls (a blocking
    collective, or a launch queue full behind one). DDP's all-reduces run in C++ threads py-spy does not sample."""
    share = signals.pyspy.get(COMM_SAMPLES)
    if share is None or share < COMM_EXPOSED_SHARE:
        return None
    evidence = _join(
        f"main thread inside torch.distributed calls in {pct(share)} of py-spy samples",
        "py-spy cannot see how much of NCCL's time overlaps compute: `gpumon run` times the collectives on the GPU",
        _gpu_part(signals),
    )
    return Candidate(COMM_BOUND, share, PYSPY_COMM_CONFIDENCE, evidence, {"pyspy_comm": _round(share)})


STRAGGLER_CONFIDENCE = 0.75


def rule_straggler(signals: Signals) -> Candidate | None:
    """straggler: the rank the others wait for, with its own budget. Ranks out of step: its step's excess over the
    others' median is the share lost; in lockstep (DDP), its data wait beyond the others' is."""
    step_ms, others_ms = signals.straggler_step_ms, signals.others_step_ms
    if signals.straggler_pid is None or not step_ms or others_ms is None:
        return None
    if step_ms > others_ms * (1 + STRAGGLER_THRESHOLD):  # out of step, as jobs.jobstate.find_straggler judges
        share = (step_ms - others_ms) / step_ms
        compared = f"takes {units.milliseconds(step_ms)} a step against {units.milliseconds(others_ms)} on the others"
    else:
        own, others = signals.straggler_data_share or 0.0, signals.others_data_share or 0.0
        share = max(0.0, own - others)
        compared = f"waits for data {pct(own)} of its step against {pct(others)} on the others, who wait for it in "
        compared += "their all-reduce"
    name = f"rank {signals.straggler_rank}" if signals.straggler_rank is not None else "a rank"
    budget = ", ".join(
        f"{label} {pct(value)}"
        for label, value in (
            ("data", signals.straggler_data_share),
            ("GPU", signals.straggler_gpu_share),
            ("rest", signals.straggler_rest_share),
        )
        if value is not None
    )
    evidence = _join(f"{name} (pid {signals.straggler_pid}) {compared}", f"its step: {budget}" if budget else None)
    numbers = {
        "straggler_rank": signals.straggler_rank,
        "straggler_pid": signals.straggler_pid,
        "straggler_share": _round(share),
        "straggler_step_ms": _round(step_ms),
        "others_step_ms": _round(others_ms),
        "straggler_data_share": _round(signals.straggler_data_share),
        "straggler_gpu_share": _round(signals.straggler_gpu_share),
        "straggler_rest_share": _round(signals.straggler_rest_share),
        "others_data_share": _round(signals.others_data_share),
        "ranks": signals.ranks,
    }
    return Candidate(STRAGGLER, share, STRAGGLER_CONFIDENCE, evidence, numbers)


def _step_model_confidence(signals: Signals) -> float:
    return STEP_MODEL_CONFIDENCE if signals.step_busy_from == "nvml" else STREAM_STEP_MODEL_CONFIDENCE


def rule_cpu_bound(signals: Signals) -> Candidate | None:
    """cpu_bound, from the step model: the GPU idles while the training thread runs the job's own code (its line
    from the stack sampler), not torch's dispatch, the DataLoader, copies or syncs."""
    if signals.source == SOURCE_PYSPY:
        return _pyspy_cpu_bound(signals)
    share = signals.step_shares.get("cpu")
    if share is None or share < CPU_BOUND_SHARE or not signals.has_gpu:
        return None
    lines = [
        (where, line_share)
        for where, line_share, kind in zip(
            signals.idle_lines, signals.idle_line_shares, signals.idle_line_activities, strict=False
        )
        if kind == "cpu"
    ]
    at = f", most at {lines[0][0]} ({pct(lines[0][1])})" if lines else ""
    evidence = _join(
        f"the GPU idles {pct(share)} of the time while the training thread runs its own code{at}",
        f"GPU busy {pct(signals.step_shares.get('gpu_busy'))}",
        _gpu_part(signals),
    )
    numbers = {
        "cpu_share": _round(share),
        "gpu_busy": _round(signals.step_shares.get("gpu_busy")),
        "lines": [{"where": where, "share": _round(line_share)} for where, line_share in lines[:3]],
        "busy_from": signals.step_busy_from,
    }
    return Candidate(CPU_BOUND, share, _step_model_confidence(signals), evidence, numbers)


def _pyspy_cpu_bound(signals: Signals) -> Candidate | None:
    """cpu_bound without the hook: the main thread's samples in the job's own code, bounded by the GPU's idle time
    (GPU-Util). py-spy without --native cannot tell a sync inside C++ (`if loss < best:`) from the line's own CPU
    work, but such a wait keeps the GPU busy: only the idle part can be the code's."""
    share, idle = signals.pyspy.get(USER_CODE_SAMPLES), _idle_share(signals)
    if share is None or idle is None or not signals.has_gpu:
        return None
    severity = min(share, idle)
    if severity < CPU_BOUND_SHARE:
        return None
    at = f", most at {signals.pyspy_user_line}" if signals.pyspy_user_line else ""
    evidence = _join(
        f"main thread in the job's own code in {pct(share)} of py-spy samples{at}",
        f"GPU idle {pct(idle)} of the time",
        None if signals.pyspy_native else "without --native a sync inside C++ reads as the line that calls it",
    )
    numbers = {"pyspy_user_code": _round(share), "gpu_idle": _round(idle), "line": signals.pyspy_user_line}
    return Candidate(CPU_BOUND, severity, 0.7 * PYSPY_CONFIDENCE, evidence, numbers)


RULES: tuple[Callable[[Signals], Candidate | None], ...] = (
    rule_cpu_bound,
    rule_data,
    rule_host_sync,
    rule_launch,
    rule_transfer,
    rule_precision,
    rule_memory_imbalance,
    rule_throttled,
    rule_comm,
    rule_straggler,
)


def _finding(candidate: Candidate, source: str) -> Finding:
    return Finding(
        category=candidate.category,
        evidence=candidate.evidence,
        confidence=round(min(1.0, candidate.confidence), 2),
        severity=round(candidate.severity, 3),
        numbers=candidate.numbers,
        source=source,
    )


def _healthy(signals: Signals) -> Finding:
    numbers = {
        "gpu_util": _round(signals.gpu_util),
        "sm_activity": _round(signals.sm_activity),
        "tensor_activity": _round(signals.tensor_activity),
        "data_share": _round(signals.data_share),
        "samples_per_s": _round(signals.samples_per_s),
    }
    parts = [_gpu_part(signals)]
    if signals.tensor_activity is not None:
        parts.append(f"tensor activity {pct100(signals.tensor_activity)}")
    if signals.data_share is not None:
        parts.append(f"waits for data {pct(signals.data_share)} of each step")
    parts.extend(power_limit_lines(signals))
    factor = _source_factor(signals)
    if signals.has_gpu and signals.gpu_util is not None:
        advice = ""
        if gpu_busy(signals):
            confidence = (0.85 if signals.has_gpm else 0.65) * factor
            evidence = _join("the GPU is busy", *parts)
        else:
            confidence = 0.2 * factor
            evidence = _join(
                "no bottleneck stands out",
                *parts,
                PYSPY_BLIND
                if signals.source == SOURCE_PYSPY and not signals.pyspy_native
                else "watch longer, or attach the hook for step data"
                if signals.source != SOURCE_HOOK
                else None,
            )
            advice = HEALTHY_ADVICE_UNDER_USED
    elif signals.device == "cpu":
        confidence = 0.6 * factor
        evidence = _join("computes on the CPU (no GPU in use) and is not waiting for data", *parts)
        advice = HEALTHY_ADVICE_CPU
    elif signals.source == SOURCE_HOOK and signals.steps:
        confidence = 0.3
        evidence = _join("no GPU figures (NVML unavailable) and no data wait", *parts)
        advice = HEALTHY_ADVICE_NO_GPU_FIGURES
    else:
        confidence = 0.0
        evidence = "not enough data to judge (no steps and no GPU figures in the window)"
        advice = HEALTHY_ADVICE_NO_DATA
    return Finding(
        category=HEALTHY,
        evidence=evidence,
        confidence=round(confidence, 2),
        severity=0.0,
        numbers=numbers,
        source=signals.source,
        advice_text=advice,
    )


def _within_the_step(candidates: list[Candidate]) -> list[Candidate]:
    """Each candidate's severity is a share of the step time: in order of weight, each is given at most what the
    ones before left, so the shares add up to at most 100% (and none is dropped)."""
    left = 1.0
    out = []
    for candidate in candidates:
        share = max(0.0, min(candidate.severity, left))
        left -= share
        out.append(replace(candidate, severity=share))
    return out


def diagnose(signals: Signals) -> Finding:
    """The dominant bottleneck of the job (or `healthy`), with the other problems found as secondary findings."""
    candidates = [c for rule in RULES if (c := rule(signals)) is not None and c.severity >= MIN_SEVERITY]
    if not candidates:
        return _healthy(signals)
    candidates.sort(key=lambda c: c.severity * c.confidence, reverse=True)
    primary, *others = _within_the_step(candidates)
    secondary = tuple(_finding(c, signals.source) for c in others)
    return replace(_finding(primary, signals.source), secondary=secondary)
