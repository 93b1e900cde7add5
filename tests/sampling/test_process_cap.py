"""The processes of one snapshot capped, whether sampled or read from a recording: the heaviest on GPU memory,
then CPU, kept in their order, each with its busiest descendants."""

from __future__ import annotations

from pathlib import Path

from gpumon.sampling.processes import MAX_CHILDREN, MAX_PROCESSES, keep_top_processes
from gpumon.sampling.recording import RecordingWriter, read_recording
from gpumon.sampling.snapshot import ProcessSample, Snapshot


def flood(count: int) -> tuple[ProcessSample, ...]:
    """`count` processes; pid n holds n MiB of GPU memory, so the highest pids are the heaviest."""
    return tuple(ProcessSample(pid=pid, gpu_indices=(0,), gpu_memory=pid << 20) for pid in range(1, count + 1))


def entries(processes: tuple[ProcessSample, ...]) -> int:
    return len(processes) + sum(len(process.children) for process in processes)


def test_a_few_processes_are_kept_as_they_are() -> None:
    few = flood(10)
    assert keep_top_processes(few) is few


def test_the_heaviest_processes_are_kept_in_their_order() -> None:
    kept = keep_top_processes(flood(15_000))
    assert len(kept) == MAX_PROCESSES
    assert [process.pid for process in kept] == list(range(15_000 - MAX_PROCESSES + 1, 15_001))


def test_cpu_ranks_processes_without_gpu_memory() -> None:
    idle = tuple(ProcessSample(pid=pid, cpu_percent=float(pid % 7)) for pid in range(MAX_PROCESSES + 50))
    kept = keep_top_processes(idle)
    assert len(kept) == MAX_PROCESSES
    assert min(process.cpu_percent or 0.0 for process in kept) >= 0.0
    assert sum(1 for process in kept if process.cpu_percent == 0.0) < sum(1 for p in idle if p.cpu_percent == 0.0)


def test_descendants_count_towards_the_cap() -> None:
    workers = tuple(ProcessSample(pid=10_000 + n, cpu_percent=float(n)) for n in range(15_000))
    parent = ProcessSample(pid=1, gpu_indices=(0,), gpu_memory=1 << 30, children=workers)
    (kept,) = keep_top_processes((parent,))
    assert len(kept.children) == MAX_CHILDREN
    assert [child.cpu_percent for child in kept.children] == [float(n) for n in range(15_000 - MAX_CHILDREN, 15_000)]
    many = tuple(ProcessSample(pid=pid, gpu_memory=pid, children=workers[:100]) for pid in range(1, 2000))
    assert entries(keep_top_processes(many)) <= MAX_PROCESSES


def test_a_recording_of_15000_processes_is_read_capped(tmp_path: Path) -> None:
    path = tmp_path / "flood.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream)
        for tick in range(3):
            writer.write(Snapshot(timestamp=1_795_000_000.0 + tick, processes=flood(15_000)))
    snapshots = read_recording(path)
    assert len(snapshots) == 3
    for snapshot in snapshots:
        assert len(snapshot.processes) == MAX_PROCESSES
        assert snapshot.processes[-1].pid == 15_000
