"""The step model: every millisecond of a job's steps has one owner, the GPU's work or the cause of its idling.

GPU busy is measured: NVML's GPU-Util of the job's GPUs over the window (the driver's share of time with a kernel
running), else the share of the hook's samples at which the training stream had work queued. The stream is the
second choice: an in-process sampler gets its turn when the training thread lets go of the GIL, mostly inside a
torch op as it launches, which shows the stream idler than it is under launch-heavy loads (on an H200, a loop at
GPU-Util 72% and SM activity 60% read 37% busy by the stream).

Idle time is split by what the training thread was doing at the samples where the stream was idle
(gpumon.protocol.activity), except the idle that syncs cause: a sync drains the GPU's queue, and until the host has
launched new work the GPU waits. Without syncs the host would run ahead, so a step would take max(host time not
spent waiting in syncs, GPU busy time); what the job takes beyond that is the syncs' cost (`sync_idle`), and the
rest of the idle time keeps its host-side owners, scaled to what is left.

Some host time the hook measures directly instead of sampling (`MeasuredHostTime`): the garbage collector's passes
(the sampler cannot run while a collection holds the GIL, so its samples land on whatever line ran next), the
caching allocator's `empty_cache` and device->host copies. Where the hook saw the training stream idle during such
time (a collection that began with nothing queued, the frees after `empty_cache` drained the stream, a blocking copy
after its drain), that time is GPU idle whatever GPU-Util says: NVML counts a context busy through the allocator's
frees. The rest of their time owns idle as syncs do (the drain after them) or, for the collector, as host work does.
An optimizer whose parameters live on the CPU turns its samples from torch's launches into CPU math.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpumon.jobs.host_profile import HostProfile, SampledLine, window_profile
from gpumon.protocol import activity

GPU_BUSY = "gpu_busy"
DATA = "data"
H2D = "h2d"
SYNC_WAIT = "sync_wait"
SYNC_IDLE = "sync_idle"
D2H = "d2h"
COMM = "comm"
LAUNCH = "launch"
CPU = "cpu"
GC = "gc"
ALLOC = "alloc"
CPU_OPTIMIZER = "cpu_optimizer"
OTHER = "other"
OWNERS = (GPU_BUSY, DATA, H2D, D2H, SYNC_WAIT, SYNC_IDLE, COMM, LAUNCH, CPU, GC, ALLOC, CPU_OPTIMIZER, OTHER)
"""The owners of a step's time, in the order of the bar; their shares add up to 1."""
LABELS = {
    GPU_BUSY: "GPU busy",
    DATA: "waiting for data",
    H2D: "host->device copies",
    SYNC_WAIT: "GPU idle in a sync",
    SYNC_IDLE: "GPU idle after syncs",
    D2H: "device->host copies",
    COMM: "communication",
    LAUNCH: "torch dispatch and launch",
    CPU: "the job's own CPU code",
    GC: "Python's garbage collector",
    ALLOC: "CUDA allocator (empty_cache)",
    CPU_OPTIMIZER: "the optimizer on the CPU",
    OTHER: "other",
}
SHORT_LABELS = {
    GPU_BUSY: "GPU",
    DATA: "data",
    H2D: "H2D",
    SYNC_WAIT: "sync",
    SYNC_IDLE: "post-sync",
    D2H: "D2H",
    COMM: "comm",
    LAUNCH: "launch",
    CPU: "cpu",
    GC: "gc",
    ALLOC: "alloc",
    CPU_OPTIMIZER: "cpu-opt",
    OTHER: "other",
}
OWNER_OF_ACTIVITY = {
    activity.DATA_WAIT: DATA,
    activity.DATA_COLLATE: DATA,
    activity.DATA_LOAD: DATA,
    activity.H2D: H2D,
    activity.SYNC: SYNC_WAIT,
    activity.COMM: COMM,
    activity.FORWARD: LAUNCH,
    activity.BACKWARD: LAUNCH,
    activity.OPTIMIZER: LAUNCH,
    activity.CPU: CPU,
    activity.OTHER: OTHER,
    activity.ALLOC: ALLOC,
}
ALLOC_ACTIVITY = activity.ALLOC
MIN_SAMPLES = 20
"""Fewer samples than this (one second at the default rate) make no step model."""
BY_SAMPLER = "stream"
BY_NVML = "nvml"
TOP_LINES = 5
RECENT_S = 10.0
"""The window of the live views (the job pane, attach --json): the last ten seconds of the sampler's counts."""
SHOWN_MIN = 0.01
"""Owners with less of the step than this are left out of the one-line splits."""


@dataclass(frozen=True, slots=True)
class LineShare:
    """One line of the job where the GPU idled, and the share of the time it did there."""

    where: str
    activity: str
    idle_share: float
    busy_fraction: float | None = None
    """Of the line's samples with the GPU's state known, the fraction with work queued: a line that launches many tiny
    ops keeps a little queued, a line of host-only work lets the queue drain (None: no state known)."""


@dataclass(frozen=True, slots=True)
class StepModel:
    """Shares of the step time by owner (they add up to 1), how GPU busy was read, and the lines behind the idle."""

    shares: Mapping[str, float]
    busy_from: str
    """BY_NVML (GPU-Util) or BY_SAMPLER (the training stream, queried at each sample)."""
    samples: int
    sync_wait: float
    """Share of the time the host spent waiting in syncs (the GPU busy meanwhile, mostly)."""
    lines: tuple[LineShare, ...] = field(default=())
    by_activity: Mapping[str, float] = field(default_factory=dict)
    """GPU-idle share by the host's finer activity (data_wait, data_collate, data_load, forward, ...)."""

    @property
    def idle(self) -> float:
        """The share of the step the GPU idles: 1 minus GPU busy."""
        return 1.0 - self.shares.get(GPU_BUSY, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The model as JSON: the shares of every owner, how busy was read, the samples, the idle lines."""
        return {
            "shares": {owner: round(self.shares.get(owner, 0.0), 4) for owner in OWNERS},
            "busy_from": self.busy_from,
            "samples": self.samples,
            "sync_wait": round(self.sync_wait, 4),
            "lines": [
                {
                    "where": line.where,
                    "activity": line.activity,
                    "idle_share": round(line.idle_share, 4),
                    "busy_fraction": None if line.busy_fraction is None else round(line.busy_fraction, 4),
                }
                for line in self.lines
            ],
            "by_activity": {name: round(share, 4) for name, share in self.by_activity.items()},
        }


@dataclass(frozen=True, slots=True)
class MeasuredHostTime:
    """Host time the hook timed itself, as shares of the wall time; each `*_idle` the part of it during which the
    training stream was seen idle (GPU idle for certain)."""

    gc: float = 0.0
    gc_idle: float = 0.0
    alloc: float = 0.0
    alloc_idle: float = 0.0
    d2h: float = 0.0
    d2h_idle: float = 0.0
    h2d_wait: float = 0.0
    """Blocking host->device copies that found GPU work queued (the budget times them among the syncs)."""
    optimizer_on_cpu: bool = False

    @property
    def known_idle(self) -> float:
        """The GPU idle measured outright, whatever GPU-Util says: at most 1."""
        return min(1.0, self.gc_idle + self.alloc_idle + self.d2h_idle)


NO_MEASURED_TIME = MeasuredHostTime()


def step_model(
    profile: HostProfile | None,
    nvml_busy: float | None = None,
    sync_wait: float | None = None,
    comm_wait: float | None = None,
    measured: MeasuredHostTime = NO_MEASURED_TIME,
) -> StepModel | None:
    """The step model of one window's sampler counts. `nvml_busy` (0-1, GPU-Util), where given, is GPU busy (at most
    what the measured idle leaves); else the stream's state at the samples is; `sync_wait` (the budget's measured
    share of the step in syncs) is preferred to the sampler's count of sync samples when given; `comm_wait` (the
    share of the timed steps the training stream waited in collectives) is communication, taken out of GPU busy (the
    stream waiting on NCCL, and NCCL's kernels, read as busy); `measured` is the host time the hook timed itself.
    None without enough samples, or without any GPU figure."""
    if profile is None or profile.samples < MIN_SAMPLES:
        return None
    counts = profile.activities
    idle_by = {name: c[0] for name, c in counts.items()}
    known = sum(c[0] + c[1] for c in counts.values())
    total = sum(sum(c) for c in counts.values())
    if total <= 0:
        return None
    sync_samples = sum(counts.get(activity.SYNC, (0, 0, 0)))
    # A blocking host->device copy (from pageable memory) first waits for the queued work, as a sync does, and the
    # budget times that wait among the syncs' (and apart, h2d_wait): the host in a copy while the stream is busy is
    # the copy's wait, which the sampler sees only where it can read the stream's state.
    copy_wait = max(counts.get(activity.H2D, (0, 0, 0))[1] / total, measured.h2d_wait)
    wait = max(0.0, sync_wait - copy_wait) if sync_wait is not None else sync_samples / total
    idle_known = sum(idle_by.values())
    if nvml_busy is not None:
        busy = max(0.0, min(1.0, nvml_busy))
        busy_from = BY_NVML
    elif known >= MIN_SAMPLES:
        busy = sum(c[1] for c in counts.values()) / known
        busy_from = BY_SAMPLER
    else:
        return None
    busy = min(busy, 1.0 - measured.known_idle)
    if idle_known >= MIN_SAMPLES:
        # What the host did while the stream was seen idle, scaled to the idle time.
        weights: dict[str, float] = {name: float(n) for name, n in idle_by.items() if n}
        denominator, per_line = idle_known, "idle"
    else:
        # Inferred split: while the host waits in a sync the GPU works, so sync samples own no idle time here.
        weights = {name: float(c[0] + c[1] + c[2]) for name, c in counts.items() if name != activity.SYNC}
        weights = {name: n for name, n in weights.items() if n}
        denominator, per_line = int(sum(weights.values())), "total"
    idle = max(0.0, 1.0 - busy)
    split = _split_idle(idle, weights, wait, copy_wait, busy, measured)
    shares = dict.fromkeys(OWNERS, 0.0)
    exposed = min(busy, max(0.0, comm_wait or 0.0))
    shares[GPU_BUSY] = busy - exposed
    shares[COMM] = exposed
    for owner, part in split.owned.items():
        shares[owner] += part
    optimizer_owner = CPU_OPTIMIZER if measured.optimizer_on_cpu else LAUNCH
    for name, part in split.by_activity.items():
        owner = optimizer_owner if name == activity.OPTIMIZER else OWNER_OF_ACTIVITY.get(name, OTHER)
        shares[owner] += part
    scale = split.scale
    if per_line == "idle":
        lines = _idle_lines(profile.lines, lambda line: (1.0 - busy) * line.idle / denominator * scale)
    else:
        lines = _idle_lines(
            profile.lines,
            lambda line: 0.0 if line.activity == activity.SYNC else (1.0 - busy) * line.total / denominator * scale,
        )
    return StepModel(
        shares=shares,
        busy_from=busy_from,
        samples=profile.samples,
        sync_wait=wait,
        lines=lines,
        by_activity={name: share for name, share in split.by_activity.items() if share > 0},
    )


@dataclass(frozen=True, slots=True)
class IdleSplit:
    """The idle time given to owners outright (syncs, their drain, measured host time) and, per sampled activity,
    what is left of the samples' share; `scale` is how much of a sampled share is left."""

    owned: Mapping[str, float]
    by_activity: Mapping[str, float]
    scale: float


def _split_idle(
    idle: float, weights: Mapping[str, float], wait: float, copy_wait: float, busy: float, measured: MeasuredHostTime
) -> IdleSplit:
    """Give the idle time its owners, in order: the GPU idle seen while the host waited in a sync, a host->device
    copy or the allocator; the idle the hook measured outright (copies, the allocator's frees, the collector); the
    drain after waits (syncs, and the waiting parts of empty_cache and of blocking copies either way), shared by
    their waits; the collector's other passes as host work; then what is left by the sampled activities."""
    total = sum(weights.values())
    sampled = {name: idle * n / total for name, n in weights.items()} if total > 0 else {}
    owned = dict.fromkeys((SYNC_WAIT, SYNC_IDLE, H2D, D2H, ALLOC, GC), 0.0)
    left = idle
    in_sync = min(left, sampled.pop(activity.SYNC, 0.0))
    in_alloc = sampled.pop(ALLOC_ACTIVITY, 0.0)
    # A blocking copy waits for the queued work and then copies with the GPU idle: the idle seen inside it is the
    # copy's, before any drain after waits is reckoned.
    in_copy = sampled.pop(activity.H2D, 0.0)
    # The sampler reads a blocking copy, and empty_cache, as a sync or as the allocator's frame: time measured
    # outright replaces those samples.
    d2h_idle = min(idle, measured.d2h_idle)
    alloc_idle = min(idle, measured.alloc_idle)
    in_sync = max(0.0, in_sync - d2h_idle)
    in_alloc = max(0.0, in_alloc - alloc_idle)
    owned[SYNC_WAIT] = in_sync
    owned[ALLOC] = in_alloc
    owned[H2D] = in_copy
    left -= in_sync + in_alloc + in_copy
    direct = min(left, d2h_idle + alloc_idle + measured.gc_idle)
    if direct > 0:
        ratio = direct / (d2h_idle + alloc_idle + measured.gc_idle)
        owned[D2H] += d2h_idle * ratio
        owned[ALLOC] += alloc_idle * ratio
        owned[GC] += measured.gc_idle * ratio
        left -= direct
    waits = {
        SYNC_IDLE: max(0.0, wait),
        H2D: max(0.0, copy_wait),
        D2H: max(0.0, measured.d2h - measured.d2h_idle),
        ALLOC: max(0.0, measured.alloc - measured.alloc_idle),
    }
    waited = sum(waits.values())
    drain = min(left, sync_cost(min(1.0, waited), busy)) if waited > 0 else 0.0
    for owner, part in waits.items():
        owned[owner] += drain * part / waited if waited > 0 else 0.0
    left -= drain
    # The collector's other passes stop the host as its own code does: their time is idle where the host is what
    # the GPU waits for, which the sampled host activities (their samples landed after each pass) say.
    host_side = sum(part for name, part in sampled.items() if name not in activity.DATA_ACTIVITIES)
    gc_rest = min(max(0.0, measured.gc - measured.gc_idle), host_side * left / max(sum(sampled.values()), 1e-12))
    gc_rest = max(0.0, min(left, gc_rest))
    owned[GC] += gc_rest
    left -= gc_rest
    rest = sum(sampled.values())
    if rest > 0:
        scale = left / rest
        by_activity = {name: part * scale for name, part in sampled.items()}
    else:
        scale = 0.0
        by_activity = {}
        owned[OTHER] = owned.get(OTHER, 0.0) + max(0.0, left)
    return IdleSplit(owned=owned, by_activity=by_activity, scale=scale)


def recent_step_model(
    profiles: Sequence[HostProfile], seconds: float = RECENT_S, nvml_busy: float | None = None
) -> StepModel | None:
    """The step model of the last `seconds` up to the newest profile (None without profiles or enough samples)."""
    if not profiles:
        return None
    end = profiles[-1].t
    return step_model(window_profile(profiles, end - seconds, end), nvml_busy=nvml_busy)


def shown_shares(shares: Mapping[str, float], least: float = SHOWN_MIN) -> list[tuple[str, float]]:
    """(owner, share) of the owners with at least `least` of the step, in OWNERS order."""
    return [(owner, shares[owner]) for owner in OWNERS if shares.get(owner, 0.0) >= least]


def sync_cost(wait: float, busy: float) -> float:
    """The share of the step that syncs cost, from the share the host waits in them and the GPU's busy share: the
    host, free of them, would run ahead, and a step would take max(the rest of its host time, the GPU's)."""
    return max(0.0, 1.0 - max(1.0 - wait, busy))


def _idle_lines(lines: tuple[SampledLine, ...], idle_share: Callable[[SampledLine], float]) -> tuple[LineShare, ...]:
    """The lines where the GPU idled most, with the share of the time it idled there (after the syncs' part)."""
    shares = [(idle_share(line), line) for line in lines]
    ranked = sorted(((share, line) for share, line in shares if share > 0), key=lambda pair: -pair[0])[:TOP_LINES]
    return tuple(LineShare(line.where(), line.activity, share, _busy_fraction(line)) for share, line in ranked)


def _busy_fraction(line: SampledLine) -> float | None:
    idle, busy, _unknown = line.counts
    return busy / (idle + busy) if idle + busy else None


OWNER_OF_PYSPY = {
    "cuda_sync": SYNC_IDLE,
    "data_wait": DATA,
    "forward": LAUNCH,
    "backward": LAUNCH,
    "optimizer": LAUNCH,
    "comm": COMM,
    "h2d": H2D,
    "user_code": CPU,
    "alloc": ALLOC,
    "elsewhere": OTHER,
}
"""The py-spy estimate's categories (gpumon.jobs.pyspy_categories) and the owners they stand for."""


BLOCKING_PYSPY = frozenset({"cuda_sync", "h2d", "data_wait"})
"""py-spy's categories in which the training thread blocks: while it waits (for the GPU in a sync, for a blocking copy,
for the DataLoader's next batch) the GPU works off what was queued and then idles until the thread queues more, so
the idle such a wait leaves its owner is sync_cost of its share, not its samples' share of the idle."""


D2H_WAIT_RATE = 0.5e9
"""Bytes/s the GPU sends to the host (PCIe TX) from which py-spy's waits for the GPU are copies back (`.cpu()`,
`.to("cpu")`, `.numpy()` of whole tensors), not scalar syncs: `.item()`-style syncs moved at most 13 MB/s on the
H200, the copies of the generated corpus 0.8-2.9 GB/s (2026-11-29). py-spy sees the same line either way."""


HOST_OPTIMIZER_SHARE = 0.3
"""py-spy samples in torch.optim from which, with the main process on HOST_OPTIMIZER_CPU, the optimizer's math runs on
host tensors: an optimizer on the GPU launches its kernels from one thread, and its frames took 0.02-0.22 of the
samples of launch-bound jobs on the H200; host ones 0.41-0.72 (2026-11-29)."""
HOST_OPTIMIZER_CPU = 200.0
"""Main-process CPU percent from which torch's intra-op threads are computing beside the training thread (host
optimizers ran at 260-313%; launch-bound jobs at 82-119%)."""


def optimizer_on_host(fractions: Mapping[str, float], main_cpu: float | None) -> bool:
    """Whether py-spy's time in torch.optim is CPU math on host tensors (see HOST_OPTIMIZER_SHARE)."""
    return (
        main_cpu is not None
        and main_cpu >= HOST_OPTIMIZER_CPU
        and fractions.get("optimizer", 0.0) >= HOST_OPTIMIZER_SHARE
    )


def estimate_step_model(
    fractions: Mapping[str, float],
    busy: float,
    samples: int,
    kernel_fill: float | None = None,
    d2h_rate: float | None = None,
    main_cpu: float | None = None,
) -> StepModel:
    """The step model from py-spy's main-thread fractions (no GPU state per sample) and GPU busy from GPU-Util.
    Syncs own the drain after them (sync_cost), and so do host->device copies (a copy long enough for py-spy to see
    is a blocking one, which waits for the queued work as a sync does and then copies with the GPU idle) and the
    DataLoader's waits (BLOCKING_PYSPY); the rest of the idle goes to each category by its share of the samples, the
    remainder being nobody's (other). py-spy cannot tell a thread launching tiny kernels from one blocked in a
    launch behind a full queue of big ones, so torch's frames own idle in proportion to how empty the running
    kernels leave the SMs (`kernel_fill`: SM activity over GPU-Util, where GPM gives it), but at least the part of
    their time that exceeds GPU busy: no queue was full then. Where the GPU sends the host at least D2H_WAIT_RATE
    (`d2h_rate`, PCIe TX), the syncs' share is the device->host copies'; where the optimizer computes on the host
    (`optimizer_on_host`, from the main process's CPU percent), its frames are the CPU optimizer's."""
    busy = max(0.0, min(1.0, busy))
    idle = 1.0 - busy
    blocked = {name: max(0.0, fractions.get(name, 0.0)) for name in BLOCKING_PYSPY}
    wait = blocked["cuda_sync"]
    shares = dict.fromkeys(OWNERS, 0.0)
    shares[GPU_BUSY] = busy
    waited = sum(blocked.values())
    drain = min(idle, sync_cost(min(1.0, waited), busy)) if waited > 0 else 0.0
    for name, part in blocked.items():
        shares[OWNER_OF_PYSPY[name]] += drain * part / waited if waited > 0 else 0.0
    left = idle - drain
    if d2h_rate is not None and d2h_rate >= D2H_WAIT_RATE:
        shares[D2H], shares[SYNC_IDLE] = shares[SYNC_IDLE], 0.0
    others = {name: share for name, share in fractions.items() if name not in BLOCKING_PYSPY and share > 0}
    total = sum(others.values())
    launch_weight = 1.0 if kernel_fill is None else max(0.0, min(1.0, 1.0 - kernel_fill))
    # A thread blocked in a launch behind a full queue keeps the GPU busy: at most the busy share of the time in
    # torch's frames can be spent so, and the GPU idled through the rest of it.
    owner_of = dict(OWNER_OF_PYSPY)
    if optimizer_on_host(fractions, main_cpu):
        owner_of["optimizer"] = CPU_OPTIMIZER
    in_torch = sum(share for name, share in others.items() if owner_of.get(name, OTHER) == LAUNCH)
    torch_idle = left * in_torch / total if total > 0 else 0.0
    if torch_idle > 0:
        launch_weight = max(launch_weight, min(1.0, max(0.0, in_torch - busy) / torch_idle))
    given = 0.0
    for name, share in others.items():
        owner = owner_of.get(name, OTHER)
        part = left * share / total if total > 0 else 0.0
        if owner == LAUNCH:
            part *= launch_weight
        shares[owner] += part
        given += part
    shares[OTHER] += max(0.0, left - given)
    return StepModel(shares=shares, busy_from=BY_NVML, samples=samples, sync_wait=wait)
