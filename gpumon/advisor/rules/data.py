"""input_bound and io_bound: the training loop waits for its batches, on the loaders' CPU or on storage."""

from __future__ import annotations

from gpumon.advisor.categories import (
    INPUT_BOUND,
    IO_BOUND,
)
from gpumon.advisor.rules.common import (
    Candidate,
    cores_part,
    gpu_part,
    join_parts,
    pct,
    pct100,
    rate,
    rounded,
    source_factor,
)
from gpumon.advisor.signals import SOURCE_PYSPY, Signals

# Thresholds (percent figures are 0-100 as NVML gives them; shares are 0-1).
DATA_SHARE_INPUT = 0.20
"""Waiting for data this share of each step (or more) makes the job input-bound."""
PYSPY_DATA_SHARE = 0.20
IOWAIT_IO = 10.0
DISK_WAIT_IO = 0.30
READ_IO = 20e6
"""Bytes/s the job reads from storage beyond which loaders that are not CPU-bound are waiting on I/O."""
LOADER_CPU_IO = 60.0


def _loader_cpu(signals: Signals) -> tuple[float | None, str | None]:
    """The CPU of whatever loads the data (the workers, else the main process) and how to say it."""
    workers = signals.host.worker_cpu
    if signals.loader.num_workers == 0 or (signals.loader.num_workers is None and not workers):
        if signals.host.main_cpu is None:
            return None, "no DataLoader workers" if signals.loader.num_workers == 0 else None
        return (
            signals.host.main_cpu,
            f"no DataLoader workers: the main process loads at {pct100(signals.host.main_cpu)} CPU",
        )
    if not workers:
        count = signals.loader.num_workers
        return None, f"{count} DataLoader worker{'s' if count != 1 else ''}" if count else None
    mean = sum(workers) / len(workers)
    count = len(workers)
    return mean, f"{count} worker{'s' if count != 1 else ''} at {pct100(mean)} CPU{' each' if count > 1 else ''}"


def rule_data(signals: Signals) -> Candidate | None:
    """input_bound, or io_bound when the loaders wait on storage rather than compute."""
    if signals.source == SOURCE_PYSPY:
        data = signals.pyspy.shares.get("data_wait")
        if data is None or data < PYSPY_DATA_SHARE:
            return None
        wait_text = f"main thread waits on the DataLoader in {pct(data)} of py-spy samples"
    else:
        data = signals.step.data_share
        if data is None or data < DATA_SHARE_INPUT:
            return None
        wait_text = f"waits for data {pct(data)} of each step"
    loader_cpu, loader_text = _loader_cpu(signals)
    reads = signals.host.job_read_bytes_per_s
    io_signs = [
        signals.host.iowait is not None and signals.host.iowait >= IOWAIT_IO,
        signals.host.workers_in_disk_wait is not None and signals.host.workers_in_disk_wait >= DISK_WAIT_IO,
        reads is not None and reads >= READ_IO,
    ]
    loaders_not_busy = loader_cpu is not None and loader_cpu < LOADER_CPU_IO
    numbers = {
        "data_share": rounded(data),
        "loader_cpu": rounded(loader_cpu),
        "num_workers": signals.loader.num_workers,
        "idle_cores": signals.host.idle_cores,
        "cores": signals.host.cores,
        "gpu_util": rounded(signals.gpu.gpu_util),
    }
    confidence = (0.9 if data >= 0.4 else 0.75) * source_factor(signals)
    if any(io_signs) and (loaders_not_busy or loader_cpu is None):
        io_parts = []
        if reads is not None and reads > 0:
            io_parts.append(f"reads {rate(reads)} from disk")
        if signals.host.iowait is not None and signals.host.iowait >= 1:
            io_parts.append(f"iowait {pct100(signals.host.iowait)}")
        if signals.host.workers_in_disk_wait:
            io_parts.append(f"loaders in disk wait {pct(signals.host.workers_in_disk_wait)} of the time")
        numbers.update(
            iowait=rounded(signals.host.iowait),
            job_read_bytes_per_s=rounded(reads, 0),
            workers_in_disk_wait=rounded(signals.host.workers_in_disk_wait),
        )
        evidence = join_parts(wait_text, ", ".join(io_parts), loader_text)
        return Candidate(IO_BOUND, data, confidence * (1.0 if sum(io_signs) >= 2 else 0.8), evidence, numbers)
    collate_text = None
    if signals.budget.data_collate_share is not None and signals.budget.data_collate_share >= 0.05:
        collate_text = f"the main process's collate_fn takes {pct(signals.budget.data_collate_share)} of each step"
        numbers.update(
            data_collate_share=rounded(signals.budget.data_collate_share),
            data_worker_share=rounded(signals.budget.data_worker_share),
        )
    evidence = join_parts(wait_text, collate_text, loader_text, cores_part(signals), gpu_part(signals))
    return Candidate(INPUT_BOUND, data, confidence, evidence, numbers)
