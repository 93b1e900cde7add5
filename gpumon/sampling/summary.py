"""Plain-text rendering of one snapshot, for `gpumon snapshot` without --json."""

from __future__ import annotations

from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(value: float | None) -> str:
    """1536 -> '1.5KiB'; None -> 'N/A'."""
    if value is None:
        return "N/A"
    size = float(value)
    for unit in _UNITS:
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


def percent(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.0f}%"


def describe_gpu(gpu: GpuSample) -> str:
    parts = [
        f"GPU {gpu.index} {gpu.name}",
        f"util {percent(gpu.utilization_gpu)}",
        f"mem {human_bytes(gpu.memory_used)}/{human_bytes(gpu.memory_total)}",
    ]
    if gpu.has_gpm:
        parts.append(f"SM {percent(gpu.sm_activity)} tensor {percent(gpu.tensor_activity)}")
    if gpu.power is not None:
        limit = f"/{gpu.power_limit:.0f}" if gpu.power_limit is not None else ""
        parts.append(f"{gpu.power:.0f}{limit}W")
    if gpu.temperature is not None:
        parts.append(f"{gpu.temperature:.0f}C")
    if gpu.throttle_reasons:
        parts.append("throttled: " + ",".join(gpu.throttle_reasons))
    return "  ".join(parts)


def describe_process(process: ProcessSample, indent: str = "") -> list[str]:
    gpus = ",".join(str(index) for index in process.gpu_indices) or "-"
    line = (
        f"{indent}{process.pid:>7} {process.user or '?':<10} gpu {gpus:<3} "
        f"{human_bytes(process.gpu_memory):>9} cpu {percent(process.cpu_percent):>5}  {process.command[:60]}"
    )
    lines = [line]
    for child in process.children:
        lines.extend(describe_process(child, indent + "  "))
    return lines


def describe_snapshot(snapshot: Snapshot) -> str:
    lines = [f"{snapshot.hostname}  driver {snapshot.driver_version or 'N/A'}"]
    if snapshot.gpu_error:
        lines.append(f"GPU: {snapshot.gpu_error}")
    lines.extend(describe_gpu(gpu) for gpu in snapshot.gpus)
    cpu = snapshot.cpu
    lines.append(
        f"CPU {percent(cpu.total)} of {len(cpu.per_core)} cores  load {cpu.load[0]:.2f}  "
        f"iowait {percent(cpu.iowait)}  mem {human_bytes(cpu.memory_used)}/{human_bytes(cpu.memory_total)}  "
        f"swap {human_bytes(cpu.swap_used)}/{human_bytes(cpu.swap_total)}"
    )
    for disk in snapshot.disks:
        lines.append(
            f"disk {disk.name}: read {human_bytes(disk.read_bytes_per_s)}/s write {human_bytes(disk.write_bytes_per_s)}/s "
            f"{disk.read_iops + disk.write_iops:.0f} IOPS"
        )
    for process in snapshot.processes:
        lines.extend(describe_process(process))
    return "\n".join(lines)
