"""The /proc parsers' one-regex paths give what reading line by line gives, and HostCollector built on them."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumon.sampling import host
from gpumon.sampling.host import (
    CpuTicks,
    DiskRows,
    HostCollector,
    cpu_ticks_by_line,
    cpu_ticks_by_regex,
    diskstats_counters,
    diskstats_rows,
    meminfo_by_line,
    meminfo_by_regex,
    meminfo_fields,
    parse_cpu_ticks,
    parse_diskstats,
    read_cpu_ticks,
    read_diskstats,
)
from gpumon.sampling.snapshot import DiskSample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "host"
STAT, STAT_LATER = (FIXTURES / "stat-128cores").read_bytes(), (FIXTURES / "stat-128cores-later").read_bytes()
DISKSTATS = (FIXTURES / "diskstats-60devices").read_bytes()
DISKSTATS_LATER = (FIXTURES / "diskstats-60devices-later").read_bytes()
MEMINFO = (
    b"MemTotal:       24684092 kB\nMemFree:        24172952 kB\nMemAvailable:   24261168 kB\n"
    b"Buffers:            3468 kB\nSwapCached:            0 kB\nSwapTotal:       2097148 kB\n"
    b"SwapFree:        2000000 kB\nZswap:                 0 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n"
)


def as_cores(ticks: CpuTicks | None) -> list[tuple[float, float, float]] | None:
    """CpuTicks as cpu_ticks_by_line gives them: a (total, idle, iowait) of floats per core."""
    if ticks is None:
        return None
    return [(float(total), float(idle), float(iowait)) for total, idle, iowait in zip(*ticks, strict=True)]


def moved_on(before: bytes, after: bytes) -> bytes:
    """A third read of the same file: every number of `after` moved on again by its step from `before`."""
    numbers_before, parts = re.split(rb"(\d+)", before), re.split(rb"(\d+)", after)
    parts[1::2] = [
        str(2 * int(later) - int(earlier)).encode()
        for earlier, later in zip(numbers_before[1::2], parts[1::2], strict=True)
    ]
    return b"".join(parts)


def replace_line(text: bytes, index: int, line: bytes) -> bytes:
    lines = text.split(b"\n")
    lines[index] = line
    return b"\n".join(lines)


# ---- /proc/stat ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [STAT, STAT_LATER], ids=["stat", "stat-later"])
def test_cpu_regex_gives_the_line_by_line_ticks_of_128_cores(text: bytes) -> None:
    by_regex = cpu_ticks_by_regex(text)
    assert by_regex is not None, "the kernel's own layout takes the regex path"
    assert len(by_regex.total) == 128
    assert as_cores(by_regex) == cpu_ticks_by_line(text)
    assert all(isinstance(value, int) for column in by_regex for value in column)


CPU_LINE = b"cpu7 60 5 30 400 7 1 2 3 40 4"
ODD_CORE_LINES = {
    "five counters": b"cpu7 60 5 30 400 7",
    "four counters": b"cpu7 60 5 30 400",
    "not a number": b"cpu7 60 x 30 400 7 1 2 3 0 0",
    "a number with a letter": b"cpu7 60 5 30 400 7 1 2 3x 0 0",
    "garbage after eight counters": CPU_LINE.replace(b" 40 4", b" xyz"),
    "two spaces": CPU_LINE.replace(b" 5 ", b"  5 "),
    "a tab": CPU_LINE.replace(b" 5 ", b"\t5 "),
    "a carriage return": CPU_LINE + b"\r",
    "name without a number": CPU_LINE.replace(b"cpu7", b"cpu"),
    "another cpu line": b"cpufreq 1 2 3",
    "no core number but a letter": CPU_LINE.replace(b"cpu7", b"cpu7x"),
    "empty": b"",
}


@pytest.mark.parametrize("line", ODD_CORE_LINES.values(), ids=ODD_CORE_LINES.keys())
def test_cpu_odd_lines_give_what_the_line_by_line_parse_gives(line: bytes) -> None:
    text = replace_line(STAT, 8, line)
    by_regex = cpu_ticks_by_regex(text)
    assert by_regex is None or as_cores(by_regex) == cpu_ticks_by_line(text)
    assert as_cores(parse_cpu_ticks(text)) == cpu_ticks_by_line(text)


def test_cpu_files_not_in_the_kernel_layout(tmp_path: Path) -> None:
    first_line_a_core = b"cpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 2 3 4 5 6 7 8 9 0 0\n"
    assert cpu_ticks_by_regex(first_line_a_core) is None
    assert as_cores(parse_cpu_ticks(first_line_a_core)) == [(36.0, 9.0, 5.0), (44.0, 11.0, 6.0)]
    fewer_counters = b"cpu  1 2 3 4 5\ncpu0 1 2 3 4 5\n"  # kernels before 2.6.11: no steal
    assert as_cores(parse_cpu_ticks(fewer_counters)) == [(15.0, 9.0, 5.0)]
    assert parse_cpu_ticks(b"intr 1 2 3\n") is None
    assert read_cpu_ticks(str(tmp_path / "missing")) is None
    (tmp_path / "stat").write_bytes(STAT)
    assert as_cores(read_cpu_ticks(str(tmp_path / "stat"))) == cpu_ticks_by_line(STAT)


STAT_LINES = STAT.split(b"\n")
ODD_STAT_PIECES = [*ODD_CORE_LINES.values(), b"intr 1 2 3", b"", b"cpu  1 2 3 4 5 6 7 8 9 10", b"\r"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(STAT_LINES[:6] + STAT_LINES[-8:] + ODD_STAT_PIECES), max_size=12))
def test_cpu_regex_is_the_line_by_line_parse_or_steps_aside(lines: list[bytes]) -> None:
    text = b"\n".join(lines)
    by_regex = cpu_ticks_by_regex(text)
    assert by_regex is None or as_cores(by_regex) == cpu_ticks_by_line(text)


# ---- /proc/diskstats -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", [DISKSTATS, DISKSTATS_LATER], ids=["diskstats", "diskstats-later"])
def test_diskstats_regex_gives_the_line_by_line_counters_of_60_devices(text: bytes) -> None:
    rows = diskstats_rows(text)
    assert rows is not None, "the kernel's own layout takes the regex path"
    assert len(rows) == 60
    assert dict(DiskRows(rows)) == parse_diskstats(text)
    assert list(DiskRows(rows)) == list(parse_diskstats(text)), "in the file's order"


SDA_LINE = b"   8       0 sda 10 2 40 5 20 3 80 6 0 7 8 0 0 0 0 1 2"
ODD_DISK_LINES = {
    "fewer fields": b"   8       0 sda 10 2 40 5 20 3",
    "ten fields": b"   8       0 sda 10 2 40 5 20 3 80",
    "not a number": SDA_LINE.replace(b" 40 ", b" x "),
    "a skipped field not a number": SDA_LINE.replace(b" 5 ", b" y "),
    "a tab": SDA_LINE.replace(b" 10 ", b"\t10 "),
    "a carriage return": SDA_LINE + b"\r",
    "a name not UTF-8": SDA_LINE.replace(b"sda", b"sd\xff"),
    "a name twice": DISKSTATS.split(b"\n")[50],
    "blank": b"",
    "garbage": b"\x00\xff garbage",
}


@pytest.mark.parametrize("line", ODD_DISK_LINES.values(), ids=ODD_DISK_LINES.keys())
def test_diskstats_odd_lines_give_what_the_line_by_line_parse_gives(line: bytes) -> None:
    for text in (replace_line(DISKSTATS, 5, line), replace_line(DISKSTATS, 5, line).rstrip(b"\n")):
        rows = diskstats_rows(text)
        assert rows is None or list(DiskRows(rows).items()) == list(parse_diskstats(text).items())
        assert list(diskstats_counters(text).items()) == list(parse_diskstats(text).items())


DISK_LINES = DISKSTATS.split(b"\n")
ODD_DISK_PIECES = [*ODD_DISK_LINES.values(), b"\n", b"  8 1 sda1 1 2 3 4 5 6 7 8 9 10"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(DISK_LINES[35:45] + ODD_DISK_PIECES), max_size=12), st.booleans())
def test_diskstats_regex_is_the_line_by_line_parse_or_steps_aside(lines: list[bytes], newline_at_end: bool) -> None:
    text = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    rows = diskstats_rows(text)
    assert rows is None or list(DiskRows(rows).items()) == list(parse_diskstats(text).items())


def test_read_diskstats_of_a_file(tmp_path: Path) -> None:
    assert read_diskstats(str(tmp_path / "missing")) is None
    (tmp_path / "diskstats").write_bytes(DISKSTATS)
    assert read_diskstats(str(tmp_path / "diskstats")) == parse_diskstats(DISKSTATS)


# ---- /proc/meminfo -------------------------------------------------------------------------------


def test_meminfo_regex_gives_the_line_by_line_fields() -> None:
    fields = meminfo_by_regex(MEMINFO)
    assert fields is not None and len(fields) == 5
    assert fields == meminfo_by_line(MEMINFO)


ODD_MEMINFO = {
    "a field twice": MEMINFO + b"MemTotal:       5 kB\n",
    "not a number": MEMINFO.replace(b"24172952", b"2417x952"),
    "no space": MEMINFO.replace(b"MemFree:        ", b"MemFree:"),
    "a tab": MEMINFO.replace(b"MemFree:        ", b"MemFree:\t"),
    "no number": MEMINFO.replace(b"MemAvailable:   24261168 kB", b"MemAvailable:"),
    "a field missing": MEMINFO.replace(b"SwapFree:", b"SwapFrei:"),
    "carriage returns": MEMINFO.replace(b"\n", b"\r\n"),
    "empty": b"",
}


@pytest.mark.parametrize("text", ODD_MEMINFO.values(), ids=ODD_MEMINFO.keys())
def test_meminfo_odd_files_give_what_the_line_by_line_parse_gives(text: bytes) -> None:
    by_regex = meminfo_by_regex(text)
    assert by_regex is None or by_regex == meminfo_by_line(text)
    assert meminfo_fields(text) == meminfo_by_line(text)


# ---- HostCollector ------------------------------------------------------------------------------


class Files:
    """/proc/stat and /proc/diskstats for HostCollector, rewritten between its calls."""

    def __init__(self, directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stat, self.diskstats = directory / "stat", directory / "diskstats"
        monkeypatch.setattr(host, "_STAT", str(self.stat))
        monkeypatch.setattr(host, "_DISKSTATS", str(self.diskstats))
        monkeypatch.setattr(host, "_SYS_BLOCK", str(directory / "no-sys-block"))  # /proc/diskstats is read

    def write(self, stat: bytes, diskstats: bytes) -> None:
        self.stat.write_bytes(stat)
        self.diskstats.write_bytes(diskstats)


def collector_with_clock() -> tuple[HostCollector, Callable[[float], None]]:
    now = [0.0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    return HostCollector(clock=lambda: now[0]), advance


def reference_busy(before: bytes, after: bytes) -> tuple[tuple[float, ...], float]:
    """Each core's percent busy and the total as the per-core loop (with its clamps) makes them."""
    ticks_before, ticks_after = parse_cpu_ticks(before), parse_cpu_ticks(after)
    assert ticks_before is not None and ticks_after is not None
    per_core, busy_sum, _, elapsed_sum = host._busy_by_core(ticks_before, ticks_after)
    return per_core, round(100.0 * busy_sum / elapsed_sum, 1)


def test_collector_cpu_matches_the_per_core_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = Files(tmp_path, monkeypatch)
    collector, advance = collector_with_clock()
    files.write(STAT, DISKSTATS)
    first, _ = collector.collect()
    assert first.per_core == (0.0,) * 128 and first.total == 0.0
    files.write(STAT_LATER, DISKSTATS_LATER)
    advance(0.25)
    cpu, _ = collector.collect()
    per_core, total = reference_busy(STAT, STAT_LATER)
    assert cpu.per_core == per_core and cpu.total == total
    assert len(set(cpu.per_core)) > 10, "the fixture's cores are busy to different degrees"
    cpu0_before, cpu0_after = (
        [int(field) for field in text.split(b"\n")[1].split()[1:9]] for text in (STAT, STAT_LATER)
    )
    elapsed = sum(cpu0_after) - sum(cpu0_before)
    idle = cpu0_after[3] + cpu0_after[4] - cpu0_before[3] - cpu0_before[4]
    assert cpu.per_core[0] == round(100.0 * (elapsed - idle) / elapsed, 1)
    # cpu2's idle and iowait step back (the kernel's iowait can) while the other cores move on: the clamped loop
    # decides that call.
    cpu2 = [int(field) for field in STAT_LATER.split(b"\n")[3].split()[1:]]
    cpu2[0], cpu2[3], cpu2[4] = cpu2[0] + 10, cpu2[3] - 3, cpu2[4] - 2
    stepped_back = replace_line(moved_on(STAT, STAT_LATER), 3, b"cpu2 " + " ".join(map(str, cpu2)).encode())
    files.write(stepped_back, DISKSTATS_LATER)
    advance(0.25)
    cpu, _ = collector.collect()
    per_core, total = reference_busy(STAT_LATER, stepped_back)
    assert cpu.per_core == per_core and cpu.total == total
    assert cpu.per_core[2] == 100.0, "idle stepped back: all of cpu2's elapsed time counts as busy"


def test_collector_disks_parse_only_the_kept_disks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = Files(tmp_path, monkeypatch)
    parsed: list[bytes] = []
    row_counters = host.row_counters

    def counting(fields: bytes) -> host.DiskCounters:
        parsed.append(fields)
        return row_counters(fields)

    monkeypatch.setattr(host, "row_counters", counting)
    collector, advance = collector_with_clock()
    files.write(STAT, DISKSTATS)
    collector.collect()
    files.write(STAT_LATER, DISKSTATS_LATER)
    advance(0.25)
    _, disks = collector.collect()
    names = [disk.name for disk in disks]
    assert names == ["dm-0", "md0", "md1", *(f"nvme{index}n1" for index in range(10)), "sda"]
    assert len(parsed) == 2 * len(names), "each kept disk once a read; loops, zram and partitions never"
    expected = parse_diskstats(DISKSTATS_LATER)["nvme3n1"], parse_diskstats(DISKSTATS)["nvme3n1"]
    nvme3 = disks[names.index("nvme3n1")]
    assert nvme3.read_bytes_per_s == round((expected[0].read_bytes - expected[1].read_bytes) / 0.25, 1) > 0
    assert nvme3.write_iops == round((expected[0].write_count - expected[1].write_count) / 0.25, 2) > 0


def diskstats_of(*disks: tuple[str, int, int]) -> bytes:
    """A /proc/diskstats of these (name, reads, writes), 8 sectors a read and 16 a write."""
    return b"".join(
        f"   8 {minor:7d} {name} {reads} 0 {reads * 8} 0 {writes} 0 {writes * 16} 0 0 0 0 0 0 0 0 0 0\n".encode()
        for minor, (name, reads, writes) in enumerate(disks)
    )


def test_collector_picks_up_a_disk_added_or_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = Files(tmp_path, monkeypatch)
    collector, advance = collector_with_clock()
    files.write(STAT, diskstats_of(("sdzz", 100, 30), ("loop0", 5, 0)))
    collector.collect()
    files.write(STAT_LATER, diskstats_of(("sdzz", 100, 30), ("loop0", 5, 0), ("sdzy", 50, 20)))
    advance(0.5)
    _, disks = collector.collect()
    assert disks == (DiskSample(name="sdzy"), DiskSample(name="sdzz")), "the new disk shows from its first read"
    files.write(STAT, diskstats_of(("sdzz", 100, 40), ("loop0", 5, 0), ("sdzy", 60, 20)))
    advance(0.5)
    _, disks = collector.collect()
    assert disks == (
        DiskSample(name="sdzy", read_bytes_per_s=10 * 8 * 512 / 0.5, read_iops=20.0),
        DiskSample(name="sdzz", write_bytes_per_s=10 * 16 * 512 / 0.5, write_iops=20.0),
    ), "reads alone on one, writes alone on the other"
    files.write(STAT, diskstats_of(("sdzy", 60, 20)))
    advance(0.5)
    _, disks = collector.collect()
    assert disks == (DiskSample(name="sdzy"),), "a removed disk goes; an idle one shows 0"


def test_collector_keeps_a_partition_whose_disk_went(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition shown once its whole disk is gone has its rate at once, from the read before (when it was
    hidden behind its disk), as when every device's counters were kept."""
    files = Files(tmp_path, monkeypatch)
    collector, advance = collector_with_clock()
    files.write(STAT, diskstats_of(("sdzz", 100, 30), ("sdzz1", 40, 10)))
    _, disks = collector.collect()
    assert [disk.name for disk in disks] == ["sdzz"]
    files.write(STAT_LATER, diskstats_of(("sdzz1", 50, 15)))
    advance(0.5)
    _, disks = collector.collect()
    assert disks == (
        DiskSample(
            name="sdzz1",
            read_bytes_per_s=10 * 8 * 512 / 0.5,
            write_bytes_per_s=5 * 16 * 512 / 0.5,
            read_iops=20.0,
            write_iops=10.0,
        ),
    )


def test_collector_falls_back_when_the_files_cannot_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No /proc/stat or /proc/diskstats: psutil's figures, as before; a malformed /proc/stat line: the line-by-line
    parse's None, so psutil's as well."""
    files = Files(tmp_path, monkeypatch)
    collector, advance = collector_with_clock()
    cpu, disks = collector.collect()
    assert len(cpu.per_core) >= 1 and cpu.total == 0.0
    files.write(replace_line(STAT, 8, ODD_CORE_LINES["four counters"]), b"garbage\n")
    advance(0.25)
    cpu, disks = collector.collect()
    assert len(cpu.per_core) == len(host._psutil_cpu_ticks()[0].total) and disks == ()
