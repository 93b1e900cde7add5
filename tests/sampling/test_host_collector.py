"""HostCollector on this real machine, and the disk-name filter on made-up names."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import psutil
import pytest

from gpumon.sampling.host import (
    DISK_LIST_INTERVAL,
    CpuTicks,
    DiskCounters,
    HostCollector,
    _whole_disks,
    list_block_disks,
    partition_parent,
    read_block_stat,
    read_cpu_ticks,
    read_diskstats,
)
from gpumon.sampling.snapshot import DiskSample


def test_cpu_per_core_matches_logical_cores_and_rates_are_sane() -> None:
    collector = HostCollector()
    first_cpu, first_disks = collector.collect()
    first_rates = [rate for disk in first_disks for rate in (disk.read_bytes_per_s, disk.write_iops)]
    assert all(rate == 0.0 for rate in first_rates), "first call primes"
    sum(i * i for i in range(200_000))  # some CPU work between the two samples

    cpu, disks = collector.collect()

    assert len(cpu.per_core) == psutil.cpu_count() == len(first_cpu.per_core)
    assert all(0.0 <= core <= 100.0 for core in cpu.per_core)
    assert 0.0 <= cpu.total <= 100.0
    assert min(cpu.per_core) - 0.1 <= cpu.total <= max(cpu.per_core) + 0.1, "the total is a weighted mean of the cores"
    assert 0 < cpu.memory_used <= cpu.memory_total
    assert 0 <= cpu.swap_used <= cpu.swap_total or cpu.swap_total == 0
    assert all(value >= 0.0 for value in cpu.load)
    if sys.platform.startswith("linux"):
        assert cpu.iowait is not None and 0.0 <= cpu.iowait <= 100.0
    for disk in disks:
        assert min(disk.read_bytes_per_s, disk.write_bytes_per_s, disk.read_iops, disk.write_iops) >= 0.0
        assert not disk.name.startswith(("loop", "ram", "zram"))


def test_disks_listed_are_whole_disks_of_this_machine() -> None:
    counters = psutil.disk_io_counters(perdisk=True) or {}
    _, disks = HostCollector().collect()
    names = {disk.name for disk in disks}
    assert names <= set(counters)
    assert not any(name.startswith("loop") for name in names)
    for name in names:
        parent = partition_parent(name)
        assert parent is None or parent not in counters, f"{name} is a partition of the listed disk {parent}"


def test_partition_names_map_to_their_disk() -> None:
    assert partition_parent("nvme7n1p2") == "nvme7n1"
    assert partition_parent("sdzz3") == "sdzz"
    assert partition_parent("mmcblk9p1") == "mmcblk9"
    assert partition_parent("nvme7n1") is None
    assert partition_parent("md127") is None
    assert partition_parent("dm-3") is None


def test_whole_disk_filter() -> None:
    names = frozenset({"sdzz", "sdzz1", "nvme7n1", "nvme7n1p1", "loop0", "ram1", "zram0", "md127", "dm-0", "vdzz1"})
    assert sorted(_whole_disks(names)) == ["dm-0", "md127", "nvme7n1", "sdzz", "vdzz1"], (
        "a partition stays only when its whole disk is not listed"
    )


def test_diskstats_counters_match_psutils_on_this_machine(tmp_path: Path) -> None:
    """Our one read of /proc/diskstats gives psutil's counters for the disks psutil lists (a busy disk may move
    between the two reads, so only by a little); a file that cannot be read gives None (psutil is then used)."""
    ours = read_diskstats()
    if ours is None:
        pytest.skip("no /proc/diskstats here")
    theirs = psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
    assert set(theirs) <= set(ours)
    for name, counters in theirs.items():
        mine = ours[name]
        assert abs(mine.read_count - counters.read_count) <= 1000
        assert abs(mine.write_bytes - counters.write_bytes) <= 64 * 1024 * 1024
        assert mine.read_bytes % 512 == 0 and mine.write_bytes % 512 == 0
    assert read_diskstats(str(tmp_path / "missing")) is None
    fake = tmp_path / "diskstats"
    fake.write_text(
        "   8       0 sda 10 2 40 5 20 3 80 6 0 7 8\n   8       1 sda1 x 2 40 5 20 3 80 6 0 7 8\n short line\n"
    )
    assert read_diskstats(str(fake)) == {"sda": DiskCounters(10, 40 * 512, 20, 80 * 512)}


def test_block_stat_counters_match_diskstats_on_this_machine(tmp_path: Path) -> None:
    """Each disk /sys/block lists reads as /proc/diskstats has it (a busy disk may move between the two reads, so
    only by a little), and /proc/diskstats' whole disks are the ones listed; missing files give None."""
    listed = list_block_disks()
    everything = read_diskstats()
    if listed is None or everything is None:
        pytest.skip("no /sys/block or /proc/diskstats here")
    assert set(listed) == set(_whole_disks(frozenset(everything)))
    for name in listed:
        mine, theirs = read_block_stat(name), everything[name]
        assert mine is not None
        assert 0 <= mine.read_count - theirs.read_count <= 1000
        assert 0 <= mine.write_bytes - theirs.write_bytes <= 64 * 1024 * 1024
    assert list_block_disks(str(tmp_path / "missing")) is None
    assert read_block_stat("sda", str(tmp_path / "missing")) is None


def _block_device(sys_block: Path, name: str, reads: int, sectors_read: int, writes: int, sectors_written: int) -> None:
    (sys_block / name).mkdir(parents=True, exist_ok=True)
    (sys_block / name / "stat").write_text(
        f"{reads:8d} 0 {sectors_read:8d} 0 {writes:8d} 0 {sectors_written:8d} 0 0 0 0 0 0 0 0 0 0\n"
    )


def test_disks_are_read_from_sys_block_listed_every_few_seconds(tmp_path: Path) -> None:
    """Each disk shown is read from its own stat file; loop devices are not; a disk that goes is dropped at once
    and a new one is listed within DISK_LIST_INTERVAL."""
    now = [0.0]
    collector = HostCollector(clock=lambda: now[0], sys_block=str(tmp_path))
    _block_device(tmp_path, "nvme0n1", 100, 800, 50, 1600)
    _block_device(tmp_path, "loop3", 1, 1, 1, 1)
    assert [disk.name for disk in collector.collect()[1]] == ["nvme0n1"]

    _block_device(tmp_path, "nvme0n1", 110, 880, 55, 1760)
    _block_device(tmp_path, "sdzz", 7, 7, 7, 7)
    now[0] += 1.0
    disks = collector.collect()[1]
    assert disks == (
        DiskSample(name="nvme0n1", read_bytes_per_s=80 * 512, write_bytes_per_s=160 * 512, read_iops=10, write_iops=5),
    ), "sdzz waits for the next listing"

    now[0] += DISK_LIST_INTERVAL
    assert [disk.name for disk in collector.collect()[1]] == ["nvme0n1", "sdzz"]
    (tmp_path / "nvme0n1" / "stat").unlink()
    now[0] += 1.0
    assert [disk.name for disk in collector.collect()[1]] == ["sdzz"]
    now[0] += 1.0
    assert [disk.name for disk in collector.collect()[1]] == ["sdzz"], "listed again"


def test_cpu_ticks_match_psutils_on_this_machine(tmp_path: Path) -> None:
    """Our one read of /proc/stat gives psutil's per-core times (in clock ticks, guest time left out as psutil's
    busy figure does; a core may move on between the two reads, so only by a little); an unreadable or malformed
    file gives None (psutil is then used)."""
    ours = read_cpu_ticks()
    if ours is None:
        pytest.skip("no /proc/stat here")
    theirs = psutil.cpu_times(percpu=True)
    assert len(ours.total) == len(theirs)
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    for total, idle, iowait, core in zip(ours.total, ours.idle, ours.iowait, theirs, strict=True):
        their_total = sum(core) - getattr(core, "guest", 0.0) - getattr(core, "guest_nice", 0.0)
        assert abs(total / ticks_per_second - their_total) <= 0.5
        assert abs(idle / ticks_per_second - (core.idle + core.iowait)) <= 0.5
        assert abs(iowait / ticks_per_second - core.iowait) <= 0.5
    assert read_cpu_ticks(str(tmp_path / "missing")) is None
    fake = tmp_path / "stat"
    fake.write_text(
        "cpu  100 0 50 1000 10 0 0 0 0 0\ncpu0 60 5 30 400 7 1 2 3 40 4\ncpu1 40 0 20 600 3 0 0 0 0 0\nintr 1 2 3\n"
    )
    assert read_cpu_ticks(str(fake)) == CpuTicks([508.0, 663.0], [407.0, 603.0], [7.0, 3.0])
    fake.write_text("cpu0 60 x 30 400 7\n")
    assert read_cpu_ticks(str(fake)) is None
