"""What a torch.profiler trace says: top kernels, GPU idle gaps, host<->device copies, NCCL time and its overlap.

Reads the gzipped Chrome trace the hook's profiler capture writes (kineto's format: complete "X" events, times in
microseconds; GPU events carry `cat` "kernel", "gpu_memcpy" or "gpu_memset" and `args.device` / `args.stream`;
`ProfilerStep#k` annotations mark the steps). The file is bounded in size; a bad one raises TraceError with one
printable line.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

from gpumon import units
from gpumon.printable import printable

MAX_TRACE_FILE = 256 << 20
"""Largest .json.gz read (compressed bytes)."""
MAX_TRACE_JSON = 1 << 30
"""Largest trace read once decompressed: a few steps of a big job stay far below; a bomb stops here."""
TOP_KERNELS = 10
TOP_GAPS = 5
KERNEL = "kernel"
MEMCPY = "gpu_memcpy"
MEMSET = "gpu_memset"
STEP_PREFIX = "ProfilerStep#"
STEP_CATEGORIES = ("user_annotation", "cpu_op")


class TraceError(Exception):
    """A trace that cannot be read or is not a Chrome trace: one printable line."""


@dataclass(frozen=True, slots=True)
class KernelTotal:
    name: str
    count: int
    total_ms: float


@dataclass(frozen=True, slots=True)
class IdleGap:
    device: int
    at_ms: float
    """Start of the gap, from the first GPU event of the capture."""
    gap_ms: float


@dataclass(frozen=True, slots=True)
class CopyTotals:
    """One direction of host<->device copies."""

    count: int = 0
    ms: float = 0.0
    bytes: int = 0
    pageable_bytes: int = 0
    pageable_ms: float = 0.0

    @property
    def pageable_share(self) -> float | None:
        """Share of the bytes copied from or to pageable (not pinned) host memory; None without copies."""
        return self.pageable_bytes / self.bytes if self.bytes else None


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """The numbers of one capture. Times in milliseconds; GPU figures summed over the devices in the trace."""

    path: str
    steps: int
    step_ms: float | None
    """Mean step time from the ProfilerStep annotations; None when the trace has none."""
    cuda: bool
    """The trace has GPU activity (kernels, copies or memsets)."""
    devices: tuple[int, ...] = ()
    kernels: int = 0
    kernel_ms: float = 0.0
    top_kernels: tuple[KernelTotal, ...] = ()
    gpu_span_ms: float = 0.0
    """From the first GPU event's start to the last one's end, per device, summed."""
    gpu_busy_ms: float = 0.0
    """Time with a kernel, copy or memset running on the device (overlaps counted once)."""
    idle_gaps: tuple[IdleGap, ...] = ()
    htod: CopyTotals = field(default_factory=CopyTotals)
    dtoh: CopyTotals = field(default_factory=CopyTotals)
    nccl_kernels: int = 0
    nccl_ms: float = 0.0
    """NCCL kernels' time (overlaps between them counted once)."""
    nccl_overlap_ms: float = 0.0
    """Of nccl_ms, the time other (compute) kernels ran on the same device."""

    @property
    def gpu_idle_ms(self) -> float:
        return max(0.0, self.gpu_span_ms - self.gpu_busy_ms)

    @property
    def nccl_exposed_ms(self) -> float:
        """NCCL time with no compute kernel beside it: communication the job waits for."""
        return max(0.0, self.nccl_ms - self.nccl_overlap_ms)

    @property
    def nccl_overlap_share(self) -> float | None:
        return self.nccl_overlap_ms / self.nccl_ms if self.nccl_ms else None

    def per_step(self, ms: float) -> float | None:
        return ms / self.steps if self.steps else None

    def signal_values(self) -> dict[str, Any]:
        """The capture's figures as Signals fields (gpumon.advisor.signals.Signals), for the rules."""
        return {
            "capture_steps": self.steps,
            "capture_step_ms": _round(self.step_ms),
            "comm_ms_per_step": _round(self.per_step(self.nccl_ms)) if self.nccl_kernels else None,
            "comm_exposed_ms_per_step": _round(self.per_step(self.nccl_exposed_ms)) if self.nccl_kernels else None,
            "comm_overlap_share": _round(self.nccl_overlap_share),
        }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            gpu_idle_ms=_round(self.gpu_idle_ms),
            nccl_exposed_ms=_round(self.nccl_exposed_ms),
            nccl_overlap_share=_round(self.nccl_overlap_share),
        )
        data["htod"]["pageable_share"] = _round(self.htod.pageable_share)
        data["dtoh"]["pageable_share"] = _round(self.dtoh.pageable_share)
        return data


def read_trace(path: str) -> dict[str, Any]:
    """The trace's JSON object (gzipped or plain), bounded in size; TraceError with a one-line reason."""
    shown = printable(path)
    try:
        size = os.path.getsize(path)
        if size > MAX_TRACE_FILE:
            raise TraceError(f"{shown} is {units.size(size)}, more than the {units.size(MAX_TRACE_FILE)} read")
        with open(path, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            stream: Any = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw
            data = stream.read(MAX_TRACE_JSON + 1)
    except (OSError, EOFError, zlib.error) as error:
        reason = getattr(error, "strerror", None) or error
        raise TraceError(f"cannot read the trace {shown}: {printable(str(reason))}") from None
    if len(data) > MAX_TRACE_JSON:
        raise TraceError(f"{shown} holds more than {units.size(MAX_TRACE_JSON)} of JSON: not read")
    try:
        trace = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise TraceError(f"{shown} is not JSON: {printable(str(error))[:200]}") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceError(f"{shown} is not a Chrome trace (no traceEvents list)")
    return trace


def summarize_file(path: str) -> TraceSummary:
    return summarize(read_trace(path), path)


def summarize(trace: Mapping[str, Any], path: str = "") -> TraceSummary:
    """The summary of a trace's events (see TraceSummary). Events it does not know are ignored."""
    steps: list[float] = []
    kernel_totals: dict[str, list[float]] = {}
    activity: dict[int, list[tuple[float, float]]] = {}
    compute: dict[int, list[tuple[float, float]]] = {}
    nccl: dict[int, list[tuple[float, float]]] = {}
    copies = {"HtoD": [0, 0.0, 0, 0, 0.0], "DtoH": [0, 0.0, 0, 0, 0.0]}
    kernels = nccl_count = 0
    kernel_us = 0.0
    for event in trace.get("traceEvents", ()):
        timed = _timed(event)
        if timed is None:
            continue
        category, name, start, duration = timed
        if category in STEP_CATEGORIES and name.startswith(STEP_PREFIX):
            steps.append(duration)
            continue
        if category not in (KERNEL, MEMCPY, MEMSET):
            continue
        device = _device(event)
        interval = (start, start + duration)
        activity.setdefault(device, []).append(interval)
        if category == KERNEL:
            kernels += 1
            kernel_us += duration
            total = kernel_totals.setdefault(name, [0, 0.0])
            total[0] += 1
            total[1] += duration
            if "nccl" in name.lower():
                nccl_count += 1
                nccl.setdefault(device, []).append(interval)
            else:
                compute.setdefault(device, []).append(interval)
        elif category == MEMCPY:
            direction = "HtoD" if "HtoD" in name else "DtoH" if "DtoH" in name else None
            if direction is not None:
                row = copies[direction]
                count = _bytes(event)
                row[0] += 1
                row[1] += duration
                row[2] += count
                if "Pageable" in name:
                    row[3] += count
                    row[4] += duration
    busy = span = nccl_us = overlap_us = 0.0
    gaps: list[IdleGap] = []
    origin = min((s for intervals in activity.values() for s, _ in intervals), default=0.0)
    for device, intervals in activity.items():
        merged = merge(intervals)
        busy += total_length(merged)
        span += merged[-1][1] - merged[0][0]
        gaps += [
            IdleGap(device, round((end - origin) / 1e3, 3), round((following - end) / 1e3, 3))
            for (_, end), (following, _) in itertools.pairwise(merged)
            if following > end
        ]
        nccl_merged = merge(nccl.get(device, []))
        nccl_us += total_length(nccl_merged)
        overlap_us += total_length(intersect(nccl_merged, merge(compute.get(device, []))))
    top = sorted(kernel_totals.items(), key=lambda item: item[1][1], reverse=True)[:TOP_KERNELS]
    return TraceSummary(
        path=path,
        steps=len(steps),
        step_ms=round(sum(steps) / len(steps) / 1e3, 3) if steps else None,
        cuda=bool(activity),
        devices=tuple(sorted(activity)),
        kernels=kernels,
        kernel_ms=round(kernel_us / 1e3, 3),
        top_kernels=tuple(KernelTotal(name, int(n), round(us / 1e3, 3)) for name, (n, us) in top),
        gpu_span_ms=round(span / 1e3, 3),
        gpu_busy_ms=round(busy / 1e3, 3),
        idle_gaps=tuple(sorted(gaps, key=lambda gap: gap.gap_ms, reverse=True)[:TOP_GAPS]),
        htod=_copy_totals(copies["HtoD"]),
        dtoh=_copy_totals(copies["DtoH"]),
        nccl_kernels=nccl_count,
        nccl_ms=round(nccl_us / 1e3, 3),
        nccl_overlap_ms=round(overlap_us / 1e3, 3),
    )


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as sorted disjoint intervals."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def intersect(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intersection of two unions of sorted disjoint intervals."""
    out: list[tuple[float, float]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def total_length(intervals: Iterable[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def summary_lines(summary: TraceSummary) -> list[str]:
    """The summary for a terminal: a few lines, kernel names made printable."""
    lines = [f"trace: {printable(summary.path)}"]
    step = f", {units.milliseconds(summary.step_ms)} a step" if summary.step_ms is not None else ""
    lines.append(f"steps captured: {summary.steps}{step}")
    if not summary.cuda:
        lines.append("no CUDA kernels or copies in the trace (CPU ops only: the job does not use the GPU here)")
        return lines
    per_step = summary.steps or 1
    lines.append(
        f"GPU: {summary.kernels} kernels, {_ms(summary.kernel_ms)} kernel time; busy {_ms(summary.gpu_busy_ms)} "
        f"of {_ms(summary.gpu_span_ms)} ({units.share(_share(summary.gpu_busy_ms, summary.gpu_span_ms))}), "
        f"idle {_ms(summary.gpu_idle_ms)} ({_ms(summary.gpu_idle_ms / per_step)} a step)"
    )
    if summary.idle_gaps:
        gaps = ", ".join(f"{_ms(g.gap_ms)} at +{_ms(g.at_ms)} (GPU {g.device})" for g in summary.idle_gaps)
        lines.append(f"largest idle gaps: {gaps}")
    for label, copies in (("host->device", summary.htod), ("device->host", summary.dtoh)):
        if copies.count:
            lines.append(
                f"{label} copies: {copies.count}, {_ms(copies.ms)}, {units.size(copies.bytes)}; pageable "
                f"{units.share(copies.pageable_share, missing='?')} of the bytes ({_ms(copies.pageable_ms)})"
            )
    if summary.nccl_kernels:
        lines.append(
            f"NCCL: {summary.nccl_kernels} kernels, {_ms(summary.nccl_ms)}; overlaps compute "
            f"{units.share(summary.nccl_overlap_share, missing='?')}; exposed {_ms(summary.nccl_exposed_ms)} "
            f"({_ms(summary.nccl_exposed_ms / per_step)} a step)"
        )
    else:
        lines.append("NCCL: no NCCL kernels in the trace")
    if summary.top_kernels:
        lines.append("top kernels by GPU time:")
        for kernel in summary.top_kernels:
            share = units.share(_share(kernel.total_ms, summary.kernel_ms))
            name = printable(kernel.name)
            lines.append(f"  {_ms(kernel.total_ms):>10}  {share:>4}  x{kernel.count:<5} {name[:110]}")
    return lines


def _timed(event: Any) -> tuple[str, str, float, float] | None:
    """(category, name, start us, duration us) of a complete ("X") event with numeric times; None otherwise."""
    if not isinstance(event, dict) or event.get("ph") != "X":
        return None
    start, duration = event.get("ts"), event.get("dur")
    if not _number(start) or not _number(duration) or duration < 0:
        return None
    category, name = event.get("cat"), event.get("name")
    return (
        category if isinstance(category, str) else "",
        name if isinstance(name, str) else "",
        float(start),
        float(duration),
    )


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value and abs(value) < 1e300


def _device(event: Mapping[str, Any]) -> int:
    args = event.get("args")
    device = args.get("device") if isinstance(args, dict) else None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    pid = event.get("pid")
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else 0


def _bytes(event: Mapping[str, Any]) -> int:
    args = event.get("args")
    count = args.get("bytes") if isinstance(args, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 0


def _copy_totals(row: list[Any]) -> CopyTotals:
    return CopyTotals(int(row[0]), round(row[1] / 1e3, 3), int(row[2]), int(row[3]), round(row[4] / 1e3, 3))


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def _ms(value: float) -> str:
    return units.milliseconds(value)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
