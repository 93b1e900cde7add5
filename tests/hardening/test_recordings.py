"""Recordings you can trust: hostile files give one line naming file, line and field; a full disk keeps every
complete line."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon.sampling.recording import MAX_DEPTH, MAX_LINE_BYTES, RecordingError, RecordingWriter, read_recording
from gpumon.sampling.snapshot import MAX_GPUS, CpuSample, DiskSample, GpuSample, ProcessSample, Snapshot

REPOSITORY = Path(__file__).resolve().parents[2]
HEADER = {"type": "gpumon-recording", "version": 1, "hostname": "box", "created": 1.0, "note": ""}


def snapshot_record(timestamp: float = 100.0, **changes: Any) -> dict[str, Any]:
    gpu = GpuSample(0, "GPU-1", "H100", utilization_gpu=40.0, memory_used=2**30, memory_total=2**34, clock_sm=1980)
    process = ProcessSample(
        pid=7,
        command="python train.py",
        gpu_indices=(0,),
        cpu_percent=180.0,
        children=(ProcessSample(pid=8, ppid=7, state="sleeping"),),
    )
    snapshot = Snapshot(
        timestamp=timestamp,
        gpus=(gpu,),
        cpu=CpuSample(per_core=(10.0, 90.0), total=50.0),
        disks=(DiskSample("nvme0n1", read_bytes_per_s=1e6),),
        processes=(process,),
    )
    return {"type": "snapshot", **snapshot.to_dict(), **changes}


def write_lines(path: Path, *records: dict[str, Any] | str) -> Path:
    lines = [record if isinstance(record, str) else json.dumps(record) for record in (HEADER, *records)]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def error_of(path: Path) -> str:
    with pytest.raises(RecordingError) as caught:
        read_recording(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    return message.removeprefix(str(path))


def test_a_valid_recording_reads_back(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "run.jsonl", snapshot_record(100.0), snapshot_record(100.5))
    assert [s.timestamp for s in read_recording(path)] == [100.0, 100.5]


def test_a_string_where_a_number_belongs_names_line_and_field(tmp_path: Path) -> None:
    record = snapshot_record()
    record["gpus"][0]["utilization_gpu"] = "NaN"
    path = write_lines(tmp_path / "run.jsonl", snapshot_record(99.0), record)
    assert error_of(path) == " line 3: gpus[0].utilization_gpu: expected a percentage (0-100), got 'NaN'"


def gpu(**fields: Any) -> dict[str, Any]:
    return {"gpus": [{"index": 0, "uuid": "GPU-1", "name": "H100", **fields}]}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (gpu(utilization_gpu=float("nan")), "gpus[0].utilization_gpu: expected a percentage (0-100), got nan"),
        (gpu(power=float("inf")), "gpus[0].power: expected a non-negative number, got inf"),
        (gpu(utilization_gpu=150.0), "gpus[0].utilization_gpu: expected a percentage (0-100), got 150.0"),
        (gpu(memory_used=-1), "gpus[0].memory_used: expected a non-negative integer, got -1"),
        (gpu(memory_used=10**30), "gpus[0].memory_used: expected a non-negative integer"),
        (gpu(memory_used=True), "gpus[0].memory_used: expected a non-negative integer, got True"),
        (gpu(throttle_reasons="hot"), "gpus[0].throttle_reasons: expected a list, got 'hot'"),
        ({"gpus": [{"index": 0, "name": "H100"}]}, "gpus[0].uuid: missing"),
        ({"gpus": {"0": {}}}, "gpus: expected a list"),
        ({"cpu": {"total": None}}, "cpu.total: expected a percentage (0-100), got None"),
        ({"cpu": {"load": [1.0, 2.0]}}, "cpu.load: expected a list of 3, got 2 items"),
        ({"cpu": {"per_core": [10.0, -5.0]}}, "cpu.per_core[1]: expected a percentage (0-100), got -5.0"),
        ({"disks": [{"name": "sda", "read_iops": "fast"}]}, "disks[0].read_iops: expected a non-negative number"),
        ({"processes": [{"pid": "7"}]}, "processes[0].pid: expected a non-negative integer, got '7'"),
        (
            {"processes": [{"pid": 7, "children": [{"pid": 8, "rss": -3}]}]},
            "processes[0].children[0].rss: expected a non-negative integer, got -3",
        ),
        ({"hostname": ["box"]}, "hostname: expected a string, got ['box']"),
        ({"timestamp": "yesterday"}, "timestamp: expected seconds since the epoch, got 'yesterday'"),
        ({"timestamp": -5.0}, "timestamp: expected seconds since the epoch, got -5.0"),
        ({"timestamp": 1e300}, "timestamp: expected seconds since the epoch, got 1e+300"),
    ],
)
def test_each_bad_field_is_named(tmp_path: Path, changes: dict[str, Any], expected: str) -> None:
    path = write_lines(tmp_path / "run.jsonl", snapshot_record(99.0), snapshot_record(**changes))
    assert error_of(path).startswith(f" line 3: {expected}")


def test_a_long_outside_value_is_shown_shortened(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "run.jsonl", snapshot_record(hostname=["x" * 10_000]))
    assert len(error_of(path)) < 120


def test_a_timestamp_going_back_is_refused_naming_both_lines(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "run.jsonl",
        snapshot_record(100.0),
        snapshot_record(100.0),
        snapshot_record(101.0),
        snapshot_record(50.0),
    )
    assert error_of(path) == " line 5: timestamp: 50.0 is earlier than line 4's 101.0 (timestamps must not go back)"


def test_deep_nesting_is_refused_before_parsing(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "run.jsonl", "[" * 100_000)
    assert error_of(path) == f" line 2: nested deeper than {MAX_DEPTH} levels"
    header_deep = tmp_path / "deep.jsonl"
    header_deep.write_text("{" * 100_000 + "\n")
    assert "line 1: not a gpumon recording (nested deeper" in error_of(header_deep)


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    command = 'python -c "' + "[" * 1000 + '\\" {{' + "]" * 1000
    path = write_lines(tmp_path / "run.jsonl", snapshot_record(processes=[{"pid": 7, "command": command}]))
    assert read_recording(path)[0].processes[0].command == command


def test_a_line_past_the_cap_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "run.jsonl", snapshot_record(100.0))
    with path.open("a") as stream:
        stream.write('{"type":"snapshot","hostname":"' + "x" * MAX_LINE_BYTES + '"}\n')
    assert error_of(path) == f" line 3: line longer than {MAX_LINE_BYTES >> 20} MiB"


def test_dev_zero_fails_fast_in_bounded_memory() -> None:
    """A child process with 400 MiB of address space reads /dev/zero: one line, within seconds."""
    script = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))
        from gpumon.sampling.recording import RecordingError, read_recording
        try:
            read_recording("/dev/zero")
        except RecordingError as error:
            print(error)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "/dev/zero line 1: not a gpumon recording (line longer than 8 MiB)\n"


def gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=60, cwd=REPOSITORY
    )


def test_a_snapshot_of_more_gpus_than_any_node_holds_is_refused(tmp_path: Path) -> None:
    # 7,000 GPUs in a 3.3 MB recording once took 4 GB of history; 64 is four times the largest node.
    record = snapshot_record()
    record["gpus"] = [dict(record["gpus"][0], index=i, uuid=f"GPU-{i}") for i in range(MAX_GPUS + 1)]
    path = write_lines(tmp_path / "run.jsonl", record)
    assert error_of(path) == f" line 2: gpus: expected at most {MAX_GPUS} items, got {MAX_GPUS + 1}"
    record["gpus"] = record["gpus"][:MAX_GPUS]
    assert len(read_recording(write_lines(tmp_path / "ok.jsonl", record))[0].gpus) == MAX_GPUS


def test_replay_of_a_bad_field_is_one_line_and_exit_2(tmp_path: Path) -> None:
    record = snapshot_record()
    record["gpus"][0]["utilization_gpu"] = "NaN"
    path = write_lines(tmp_path / "run.jsonl", record)
    result = gpumon("replay", str(path))
    assert result.returncode == 2
    assert "run.jsonl line 2: gpus[0].utilization_gpu: expected a percentage" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# The writer on a full disk.


def fat_snapshot(timestamp: float) -> Snapshot:
    """About 2 KiB of JSON."""
    return Snapshot(timestamp=timestamp, processes=(ProcessSample(pid=7, command="python train.py " + "x" * 2000),))


def assert_only_complete_lines(path: Path, written: int) -> None:
    text = path.read_text()
    assert text.endswith("\n")
    snapshots = read_recording(path)
    assert len(snapshots) == written
    assert [s.timestamp for s in snapshots] == [float(i) for i in range(written)]


def fill(path: Path) -> tuple[int, OSError]:
    """Write fat snapshots to `path` until the disk refuses; (snapshots written, the error)."""
    written = 0
    with path.open("w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream, note="fill")
        try:
            for index in range(10_000):
                writer.write(fat_snapshot(float(index)))
                written += 1
        except OSError as error:
            return written, error
    raise AssertionError("the disk never filled up")


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (needs root and mount; skipped where either is missing)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except FileNotFoundError:
        pytest.skip("no mount command")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=20, check=True)


def test_a_disk_filling_mid_record_keeps_every_complete_line(small_tmpfs: Path) -> None:
    path = small_tmpfs / "run.jsonl"
    written, error = fill(path)
    assert error.errno == errno.ENOSPC
    assert written >= 10
    assert_only_complete_lines(path, written)


def test_a_file_size_limit_mid_record_keeps_every_complete_line(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (no root needed): the kernel cuts the line that crosses it short, then refuses with EFBIG."""
    path = tmp_path / "run.jsonl"
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))
        from pathlib import Path
        from test_recordings import fill
        written, error = fill(Path({str(path)!r}))
        print(written, error.errno)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    written, code = map(int, result.stdout.split())
    assert code == errno.EFBIG and written >= 10
    assert path.stat().st_size < 30_000
    assert_only_complete_lines(path, written)


def test_dev_full_raises_the_os_error() -> None:
    with open("/dev/full", "w", encoding="utf-8") as stream, pytest.raises(OSError) as caught:
        RecordingWriter(stream)
    assert caught.value.errno == errno.ENOSPC


def test_record_to_dev_full_is_one_line_and_exit_2() -> None:
    result = gpumon("record", "/dev/full", "--force", "--duration", "1")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.strip().endswith("cannot write /dev/full: No space left on device")
