"""Plain-text rendering of one snapshot, for `gpumon snapshot` without --json."""

from __future__ import annotations

from gpumon.printable import printable
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot
from gpumon.units import percent, rate, size


def describe_gpu(gpu: GpuSample) -> str:
    """One line for a GPU: name, utilization, memory, SM and tensor activity, power, temperature, throttling."""
    parts = [
        f"GPU {gpu.index} {printable(gpu.name)}",
        f"util {percent(gpu.utilization_gpu)}",
        f"mem {size(gpu.memory_used)}/{size(gpu.memory_total)}",
    ]
    if gpu.has_gpm:
        parts.append(f"SM {percent(gpu.sm_activity)} tensor {percent(gpu.tensor_activity)}")
    if gpu.power is not None:
        limit = f"/{gpu.power_limit:.0f}" if gpu.power_limit is not None else ""
        parts.append(f"{gpu.power:.0f}{limit}W")
    if gpu.temperature is not None:
        parts.append(f"{gpu.temperature:.0f}C")
    if gpu.throttle_reasons:
        parts.append("throttled: " + ",".join(printable(reason) for reason in gpu.throttle_reasons))
    return "  ".join(parts)


def describe_process(process: ProcessSample, indent: str = "") -> list[str]:
    """A GPU process and its children, one line each, the children indented under it."""
    gpus = ",".join(str(index) for index in process.gpu_indices) or "-"
    line = (
        f"{indent}{process.pid:>7} {printable(process.user or '?'):<10} gpu {gpus:<3} "
        f"{size(process.gpu_memory):>9} cpu {percent(process.cpu_percent):>5}  {printable(process.command)[:60]}"
    )
    lines = [line]
    for child in process.children:
        lines.extend(describe_process(child, indent + "  "))
    return lines


def describe_snapshot(snapshot: Snapshot) -> str:
    """The whole snapshot as text: host and driver, each GPU, CPU and memory, disks, GPU processes."""
    lines = [f"{printable(snapshot.hostname)}  driver {printable(snapshot.driver_version or 'N/A')}"]
    if snapshot.gpu_error:
        lines.append(f"GPU: {printable(snapshot.gpu_error)}")
    lines.extend(describe_gpu(gpu) for gpu in snapshot.gpus)
    cpu = snapshot.cpu
    lines.append(
        f"CPU {percent(cpu.total)} of {len(cpu.per_core)} cores  load {cpu.load[0]:.2f}  "
        f"iowait {percent(cpu.iowait)}  mem {size(cpu.memory_used)}/{size(cpu.memory_total)}  "
        f"swap {size(cpu.swap_used)}/{size(cpu.swap_total)}"
    )
    for disk in snapshot.disks:
        lines.append(
            f"disk {printable(disk.name)}: read {rate(disk.read_bytes_per_s)} write {rate(disk.write_bytes_per_s)} "
            f"{disk.read_iops + disk.write_iops:.0f} IOPS"
        )
    for process in snapshot.processes:
        lines.extend(describe_process(process))
    return "\n".join(lines)
