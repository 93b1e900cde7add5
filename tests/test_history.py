"""Tests of the history ring buffers."""

from __future__ import annotations

from gpumon.sampling.history import History, RingBuffer
from gpumon.sampling.snapshot import CpuSample, DiskSample, GpuSample, Snapshot


def test_ring_buffer_keeps_newest_values_in_order_after_wrapping():
    ring = RingBuffer(4)
    for value in range(10):
        ring.append(value)
    assert len(ring) == 4
    assert ring.last(4) == [6.0, 7.0, 8.0, 9.0]
    assert ring.last(2) == [8.0, 9.0]
    assert ring.last(100) == [6.0, 7.0, 8.0, 9.0]


def test_ring_buffer_reads_missing_values_back_as_none():
    ring = RingBuffer(3)
    ring.append(1)
    ring.append(None)
    assert ring.last(3) == [1.0, None]


def test_history_covers_ten_minutes_at_ten_hertz():
    assert History().capacity >= 600 / 0.1


def test_history_tracks_gpu_cpu_and_disk_metrics_and_pads_vanished_ones():
    history = History(seconds=10, fastest_interval=1)
    with_gpu = Snapshot(
        timestamp=1.0,
        gpus=(GpuSample(0, "GPU-0", "H100", utilization_gpu=40.0, memory_used=50, memory_total=100),),
        cpu=CpuSample(total=12.5, memory_used=1, memory_total=4),
        disks=(DiskSample("sda", read_bytes_per_s=10.0, write_bytes_per_s=5.0, read_iops=1, write_iops=2),),
    )
    history.add(with_gpu)
    history.add(Snapshot(timestamp=2.0, cpu=CpuSample(total=20.0)))
    assert history.last("gpu0.utilization_gpu", 5) == [40.0, None]
    assert history.last("gpu0.memory_percent", 5) == [50.0, None]
    assert history.last("cpu.total", 5) == [12.5, 20.0]
    assert history.last("memory.percent", 5) == [25.0, None]
    assert history.last("disk.sda.iops", 5) == [3.0, None]
    assert history.last("no.such.metric", 5) == []
    assert history.timestamps(5) == [1.0, 2.0]
    assert len(history) == 2
