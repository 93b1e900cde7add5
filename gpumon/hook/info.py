"""What the hook tells a client about the process: the hello, the periodic state and step stats.

Runs on the server thread. Reads torch only through calls that neither initialize CUDA nor
synchronize: CUDA details are read only once the job itself has initialized CUDA.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from typing import Any

from gpumon import __version__ as HOOK_VERSION
from gpumon import protocol
from gpumon.hook.runtime import (
    R_BUDGET,
    R_COMM,
    R_DATA,
    R_END,
    R_GPU,
    R_SAMPLES,
    R_SEQ,
    R_SOURCE,
    R_SYNCS,
    R_WALL,
    HookRuntime,
    copy_while_mutated,
)
from gpumon.printable import escape_surrogates
from gpumon.protocol.messages import GcTotals, OptimizerInfo

STATS_WINDOW_S = 5.0
MAX_RECORDS_PER_MESSAGE = 256
_MAX_ARG_CHARS = 1000
_MAX_ARGV_CHARS = 16_000


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.lstrip("-").isdigit() else None


def _argv() -> list[str]:
    out, total = [], 0
    for arg in sys.argv:
        arg = escape_surrogates(arg[:_MAX_ARG_CHARS])  # an undecodable byte as `\\xff`: the line must be UTF-8
        total += len(arg)
        if total > _MAX_ARGV_CHARS:
            out.append("...")
            break
        out.append(arg)
    return out


def _torch_version() -> str | None:
    torch = sys.modules.get("torch")
    return str(getattr(torch, "__version__", None)) if torch is not None else None


def cuda_info(runtime: HookRuntime | None) -> protocol.CudaInfo:
    """The job's CUDA as hello and state report it: never initializes CUDA (devices only once the job did)."""
    torch = sys.modules.get("torch")
    info = protocol.CudaInfo(
        initialized=False,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        torch_cuda=None,
        device=None,
        devices=[],
    )
    if torch is None:
        return info
    info["torch_cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    cuda = torch.cuda
    if not cuda.is_initialized():
        return info
    info["initialized"] = True
    info["device"] = runtime.cuda_device if runtime is not None else None
    devices: list[protocol.CudaDevice] = []
    for index in range(cuda.device_count()):
        props = cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        uuid_text = None
        if uuid is not None:
            uuid_text = str(uuid)
            if not uuid_text.startswith("GPU-"):
                uuid_text = "GPU-" + uuid_text
        devices.append(
            protocol.CudaDevice(
                index=index,
                name=str(props.name),
                uuid=uuid_text,
                total_memory=int(props.total_memory),
                capability=[int(props.major), int(props.minor)],
            )
        )
    info["devices"] = devices
    return info


def dist_info() -> protocol.DistInfo:
    """The job's torch.distributed place: torchrun's variables, then the process group's rank and size."""
    info = protocol.DistInfo(
        rank=_int_env("RANK"),
        local_rank=_int_env("LOCAL_RANK"),
        world_size=_int_env("WORLD_SIZE"),
        local_world_size=_int_env("LOCAL_WORLD_SIZE"),
        group_rank=_int_env("GROUP_RANK"),
        run_id=os.environ.get("TORCHELASTIC_RUN_ID"),
        master_addr=os.environ.get("MASTER_ADDR"),
        master_port=os.environ.get("MASTER_PORT"),
        initialized=False,
        backend=None,
    )
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            info["initialized"] = True
            info["rank"] = int(dist.get_rank())
            info["world_size"] = int(dist.get_world_size())
            info["backend"] = str(dist.get_backend())
    except Exception:  # noqa: BLE001 - a half-torn-down process group is reported as env only
        pass
    return info


def hello(
    runtime: HookRuntime | None, *, started: float, injected: bool, socket_refused: str | None = None
) -> protocol.Hello:
    """The `hello` message every connection starts with: the process, its command, torch, CUDA and ranks."""
    try:
        cwd = escape_surrogates(os.getcwd())
    except OSError:
        cwd = ""
    return protocol.Hello(
        type=protocol.HELLO,
        protocol=protocol.PROTOCOL_VERSION,
        pid=os.getpid(),
        ppid=os.getppid(),
        uid=os.getuid(),
        hostname=escape_surrogates(socket.gethostname()),
        argv=_argv(),
        cwd=cwd,
        executable=escape_surrogates(sys.executable),
        python=platform.python_version(),
        torch=_torch_version(),
        hook_version=HOOK_VERSION,
        started=started,
        injected=injected,
        cuda=cuda_info(runtime),
        dist=dist_info(),
        socket_refused=socket_refused,
    )


def record_dict(runtime: HookRuntime, record: list[Any]) -> protocol.StepRecord:
    """One step record (the runtime's list, R_* indices) as the protocol's StepRecord."""
    out = protocol.StepRecord(
        seq=record[R_SEQ],
        t=round(runtime.unix_time(record[R_END]), 4),
        wall_ms=round(record[R_WALL] * 1e3, 4),
        data_ms=round(record[R_DATA] * 1e3, 4),
        gpu_ms=None if record[R_GPU] is None else round(record[R_GPU], 4),
        samples=record[R_SAMPLES],
        source=record[R_SOURCE],
    )
    if record[R_SYNCS] is not None:
        out["syncs"] = record[R_SYNCS]
    if record[R_COMM] is not None:
        out["comm_ms"] = round(record[R_COMM], 4)
    budget = record[R_BUDGET]
    if budget is not None:
        full = budget.copy()
        full["gpu_ms"] = out["gpu_ms"]
        out["budget"] = full
    return out


def steps_messages(
    runtime: HookRuntime, cursor: int, records: list[list[Any]], stats: protocol.StepStats
) -> tuple[list[protocol.Steps], int]:
    """The `steps` messages for a client at `cursor` (records newer than it, at most MAX_RECORDS_PER_MESSAGE
    each, or just fresh stats when there are none), and its cursor after them. Records already gone from the
    runtime count as dropped."""
    last_seq = records[-1][R_SEQ] if records else 0
    new: list[list[Any]] = []
    dropped = 0
    if records and last_seq > cursor:
        first_seq = records[0][R_SEQ]
        dropped = max(0, first_seq - (cursor + 1))
        new = records[max(0, cursor + 1 - first_seq) :]
    messages = []
    for start in range(0, max(1, len(new)), MAX_RECORDS_PER_MESSAGE):
        chunk = new[start : start + MAX_RECORDS_PER_MESSAGE]
        messages.append(
            protocol.Steps(
                type=protocol.STEPS,
                t=round(time.time(), 4),
                last_seq=chunk[-1][R_SEQ] if chunk else last_seq,
                records=[record_dict(runtime, r) for r in chunk],
                dropped=dropped,
                stats=stats,
            )
        )
        dropped = 0
    return messages, max(cursor, last_seq)


def step_stats(runtime: HookRuntime, records: list[list[Any]], now_perf: float) -> protocol.StepStats:
    """Rates over the STATS_WINDOW_S seconds that end now (a stalled job's rates fall), means over its steps."""
    window = []
    for record in reversed(records):
        if now_perf - record[R_END] > STATS_WINDOW_S:
            break
        window.append(record)
    stats = protocol.StepStats(
        window_s=0.0,
        steps=len(window),
        steps_per_s=None,
        samples_per_s=None,
        wall_ms=None,
        data_ms=None,
        gpu_ms=None,
        data_fraction=None,
        gpu_fraction=None,
    )
    if not records:
        return stats
    if len(window) < len(records):
        span = STATS_WINDOW_S
    else:
        oldest = window[-1]
        span = min(STATS_WINDOW_S, now_perf - (oldest[R_END] - oldest[R_WALL]))
    stats["window_s"] = round(span, 4)
    stats["steps_per_s"] = round(len(window) / span, 4) if span > 0 else None
    if not window:
        return stats
    samples = [r[R_SAMPLES] for r in window if r[R_SAMPLES] is not None]
    if samples and span > 0:
        stats["samples_per_s"] = round(sum(samples) / span, 4)
    wall = sum(r[R_WALL] for r in window)
    data = sum(r[R_DATA] for r in window)
    stats["wall_ms"] = round(wall / len(window) * 1e3, 4)
    stats["data_ms"] = round(data / len(window) * 1e3, 4)
    if wall > 0:
        stats["data_fraction"] = round(min(1.0, data / wall), 4)
    timed = [r for r in window if r[R_GPU] is not None]
    if timed:
        gpu_ms = sum(r[R_GPU] for r in timed)
        stats["gpu_ms"] = round(gpu_ms / len(timed), 4)
        timed_wall = sum(r[R_WALL] for r in timed)
        if timed_wall > 0:
            stats["gpu_fraction"] = round(min(1.0, gpu_ms / 1e3 / timed_wall), 4)
    return stats


def memory_info(runtime: HookRuntime, devices: list[protocol.CudaDevice]) -> protocol.MemoryInfo | None:
    """The caching allocator's figures on the job's device (host-side counters: no sync); None without CUDA."""
    torch = runtime.torch
    if not torch.cuda.is_initialized():
        return None
    device = runtime.cuda_device
    if device is None:
        return None
    stats = torch.cuda.memory_stats(device)  # host-side counters: no sync, no CUDA call
    total = next((d.get("total_memory") for d in devices if d.get("index") == device), None)
    return protocol.MemoryInfo(
        device=device,
        allocated=int(stats.get("allocated_bytes.all.current", 0)),
        reserved=int(stats.get("reserved_bytes.all.current", 0)),
        max_allocated=int(stats.get("allocated_bytes.all.peak", 0)),
        alloc_retries=int(stats.get("num_alloc_retries", 0)),
        ooms=int(stats.get("num_ooms", 0)),
        total=total,
    )


def precision_info(runtime: HookRuntime) -> protocol.PrecisionInfo:
    """The job's precision settings as they stand, with the autocast contexts seen."""
    torch = runtime.torch
    backends = torch.backends
    autocast = None
    if runtime.autocast is not None:
        seen = dict(runtime.autocast)
        autocast = protocol.AutocastInfo(
            device_type=seen.get("device_type", ""),
            dtype=seen.get("dtype", ""),
            enabled=bool(seen.get("enabled")),
            entered=int(seen.get("entered", 0)),
            last_t=round(runtime.unix_time(seen.get("last", runtime.perf0)), 3),
        )
    return protocol.PrecisionInfo(
        autocast=autocast,
        tf32_matmul=bool(backends.cuda.matmul.allow_tf32),
        tf32_cudnn=bool(backends.cudnn.allow_tf32),
        float32_matmul_precision=str(torch.get_float32_matmul_precision()),
        cudnn_benchmark=bool(backends.cudnn.benchmark),
        cudnn_deterministic=bool(backends.cudnn.deterministic),
    )


def dataloader_infos(runtime: HookRuntime) -> list[protocol.DataLoaderInfo]:
    """The job's DataLoaders (at most MAX_LOADERS), the most recently used first."""
    entries = sorted(copy_while_mutated(runtime.loaders.values()), key=lambda e: e.last_used, reverse=True)
    return [
        protocol.DataLoaderInfo(
            id=e.id,
            dataset=e.dataset,
            batch_size=e.batch_size,
            num_workers=e.num_workers,
            pin_memory=e.pin_memory,
            prefetch_factor=e.prefetch_factor,
            persistent_workers=e.persistent_workers,
            drop_last=e.drop_last,
            worker_pids=list(e.worker_pids),
            batches=e.batches,
            wait_ms=round(e.wait_s * 1e3, 3),
            last_used=round(runtime.unix_time(e.last_used), 3) if e.last_used else 0.0,
        )
        for e in entries
    ]


def gc_totals(runtime: HookRuntime) -> GcTotals | None:
    """The collector's cumulative figures, None while the GC timer is not running."""
    timer = runtime.gc_timer
    if not timer.running:
        return None
    return GcTotals(
        ms_total=round(timer.seconds * 1e3, 4),
        idle_ms_total=round(timer.idle_seconds * 1e3, 4),
        passes_total=timer.passes,
        gen2_total=timer.gen2_passes,
        collected_total=timer.collected,
    )


def optimizer_infos(runtime: HookRuntime) -> list[OptimizerInfo]:
    """The optimizers seen stepping, in the order first seen: class, where the parameters live and the bytes of those
    on the CPU."""
    return [
        OptimizerInfo({"class": name, "params_device": device, "host_bytes": host_bytes})
        for name, device, host_bytes in copy_while_mutated(runtime.optimizers.values())
    ]


def state(
    runtime: HookRuntime,
    *,
    clients: int,
    installed_at: float,
    server_restarts: int = 0,
    socket_refused: str | None = None,
) -> protocol.State:
    """The `state` message: loaders, memory, precision, knobs, diagnosis, FLOPs, host samples, the hook's health."""
    cuda = cuda_info(runtime)
    pending: dict[str, Any] = {}
    for kind, payload, _id in copy_while_mutated(runtime.control):
        if kind == "knobs":
            pending.update(payload)
    knobs = runtime.knobs
    return protocol.State(
        type=protocol.STATE,
        t=round(time.time(), 4),
        last_seq=runtime.seq,
        step_source=runtime.step_source,
        dataloaders=dataloader_infos(runtime),
        memory=memory_info(runtime, cuda.get("devices", [])),
        precision=precision_info(runtime),
        cuda=cuda,
        knobs=protocol.KnobState(
            applied=dict(knobs.applied),
            pending=pending,
            errors=list(knobs.errors),
            ignored=list(knobs.ignored),
        ),
        diagnosis=protocol.DiagnosisState(active=runtime.diagnosis.counting, steps_left=runtime.diagnosis.left),
        flops=runtime.flops.result,
        host=runtime.sampler.result() if runtime.sampler is not None else None,
        optimizers=optimizer_infos(runtime),
        empty_cache_sites=runtime.empty_cache.top_sites(),
        gc=gc_totals(runtime),
        hook=protocol.HookInfo(
            errors=runtime.errors,
            last_error=runtime.last_error,
            clients=clients,
            installed_at=installed_at,
            server_restarts=server_restarts,
            socket_refused=socket_refused,
        ),
    )
