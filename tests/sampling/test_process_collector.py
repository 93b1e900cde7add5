"""ProcessCollector on real processes: a 'training job' on GPU 0 (per a fake NVML list) with two worker children."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from gpumon.sampling.nvml import GpuProcess
from gpumon.sampling.processes import ProcessCollector

JOB = """
import subprocess, sys, time
busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(busy.pid, idle.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def job() -> Iterator[tuple[int, int, int]]:
    """(job pid, busy worker pid, idle worker pid); all three are killed afterwards."""
    parent = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    busy, idle = (int(pid) for pid in parent.stdout.readline().split())
    try:
        yield parent.pid, busy, idle
    finally:
        for pid in (busy, idle):
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        parent.kill()
        parent.wait()


def wait_for_cpu_time(pid: int, seconds: float) -> None:
    """Block until `pid` has used `seconds` of CPU (at most 10 s of waiting)."""
    process = psutil.Process(pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        times = process.cpu_times()
        if times.user + times.system >= seconds:
            return
        time.sleep(0.02)


def test_workers_grouped_under_the_gpu_process(job: tuple[int, int, int]) -> None:
    job_pid, busy_pid, idle_pid = job
    gpu = [GpuProcess(pid=job_pid, gpu_index=0, used_memory=5 << 30, sm_percent=40.0)]
    collector = ProcessCollector()

    first = collector.collect(gpu)
    busy_start = psutil.Process(busy_pid).cpu_times()
    wait_for_cpu_time(busy_pid, busy_start.user + busy_start.system + 0.1)
    second = collector.collect(gpu)

    assert [sample.pid for sample in first] == [job_pid]
    (top,) = second
    assert top.pid == job_pid and top.gpu_indices == (0,) and top.gpu_memory == 5 << 30 and top.sm_percent == 40.0
    assert top.ppid == psutil.Process().pid
    assert "time.sleep(60)" in top.command and top.user == psutil.Process().username()
    assert top.rss is not None and top.rss > 0 and top.state is not None
    children = {child.pid: child for child in top.children}
    assert set(children) == {busy_pid, idle_pid}
    assert all(
        child.ppid == job_pid and child.gpu_indices == () and child.children == () for child in children.values()
    )
    assert first[0].children[0].cpu_percent is None, "no CPU% before a second sample"
    assert children[busy_pid].cpu_percent is not None and children[busy_pid].cpu_percent > 0
    assert children[idle_pid].state in ("sleeping", "idle")
    assert "while True" in children[busy_pid].command
    assert children[idle_pid].read_bytes_per_s is None or children[idle_pid].read_bytes_per_s >= 0


def test_pid_psutil_cannot_see_keeps_what_nvml_knows() -> None:
    missing = 2**22 + 12345  # above any pid_max default: no such process here
    gpu = [
        GpuProcess(pid=missing, gpu_index=0, used_memory=1 << 30, sm_percent=None),
        GpuProcess(pid=missing, gpu_index=1, used_memory=2 << 30, sm_percent=None),
    ]
    (sample,) = ProcessCollector().collect(gpu)
    assert sample.pid == missing and sample.gpu_indices == (0, 1) and sample.gpu_memory == 3 << 30
    assert sample.command == "" and sample.cpu_percent is None and sample.children == ()


def test_top_level_sorted_by_gpu_memory_and_extra_pids_tracked(job: tuple[int, int, int]) -> None:
    job_pid, busy_pid, idle_pid = job
    me = psutil.Process().pid
    gpu = [
        GpuProcess(pid=2**22 + 1, gpu_index=0, used_memory=1 << 30),
        GpuProcess(pid=2**22 + 2, gpu_index=1, used_memory=8 << 30),
    ]
    samples = ProcessCollector().collect(gpu, extra_pids=[job_pid, idle_pid])

    assert [sample.pid for sample in samples] == [2**22 + 2, 2**22 + 1, job_pid], (
        "GPU memory descending; the tracked job without GPU memory last; its worker only nested under it"
    )
    assert samples[-1].gpu_memory is None and {child.pid for child in samples[-1].children} == {busy_pid, idle_pid}
    assert me not in {sample.pid for sample in samples}


def test_exited_processes_are_dropped() -> None:
    short = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    collector = ProcessCollector()
    try:
        (sample,) = collector.collect([], extra_pids=[short.pid])
        assert sample.pid == short.pid and sample.gpu_indices == ()
    finally:
        short.kill()
        short.wait()

    assert collector.collect([], extra_pids=[short.pid]) == ()
    assert collector._tracked == {}, "the cached psutil.Process of the exited pid is released"


def test_parent_map_reads_only_new_processes_and_reports_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpumon.sampling.processes as processes_module

    reads: list[int] = []
    read_parent = processes_module._read_parent
    monkeypatch.setattr(processes_module, "_read_parent", lambda pid: reads.append(pid) or read_parent(pid))
    parents = processes_module.ParentMap()
    if not parents.tracks_exits:
        pytest.skip("no /proc on this system: ParentMap falls back to a full psutil scan")

    first_children, _ = parents.refresh()
    first_reads = len(reads)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reads.clear()
        children, gone = parents.refresh()
        assert child.pid in children[psutil.Process().pid]
        assert child.pid in reads and len(reads) < first_reads, "only processes new since the last refresh are read"
    finally:
        child.kill()
        child.wait()
    _, gone = parents.refresh()
    assert child.pid in gone
    assert first_children, "a Linux box always has some parent/child pairs"


def test_without_proc_the_job_tree_comes_from_a_psutil_scan(
    monkeypatch: pytest.MonkeyPatch, job: tuple[int, int, int]
) -> None:
    import gpumon.sampling.processes as processes_module

    monkeypatch.setattr(processes_module, "_PROC", "/nonexistent-proc")
    job_pid, busy_pid, idle_pid = job
    collector = ProcessCollector()
    assert not collector._parents.tracks_exits

    (top,) = collector.collect([GpuProcess(pid=job_pid, gpu_index=0, used_memory=1 << 30, sm_percent=None)])

    assert {child.pid for child in top.children} == {busy_pid, idle_pid}
