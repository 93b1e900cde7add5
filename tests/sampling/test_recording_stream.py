"""Recordings read as a stream: gzip told by its magic bytes, a killed `record --compress` still readable, and the
replay's memory independent of the recording's length."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpumon.sampling.recording import (
    RecordingError,
    RecordingWriter,
    count_snapshots,
    iter_recording,
    read_recording,
)
from gpumon.sampling.replay import Replayer
from tests.waiting import wait_until

REPOSITORY = Path(__file__).resolve().parents[2]
RECORDING = REPOSITORY / "assets" / "recordings" / "h100x2-tests.jsonl"


def write(path: Path, compress: bool, close: bool = True) -> list:
    snapshots = read_recording(RECORDING)
    with path.open("wb") as stream:
        writer = RecordingWriter(stream, note="test", compress=compress)
        for snapshot in snapshots:
            writer.write(snapshot)
        if close:
            writer.close()
    return snapshots


def test_a_compressed_recording_reads_back_whole_and_is_real_gzip(tmp_path: Path) -> None:
    plain, packed = tmp_path / "plain.jsonl", tmp_path / "packed.jsonl"
    snapshots = write(plain, compress=False)
    write(packed, compress=True)
    assert gzip.decompress(packed.read_bytes()).decode().splitlines()[1:] == plain.read_text().splitlines()[1:]
    assert read_recording(packed) == snapshots
    assert count_snapshots(packed) == count_snapshots(plain) == len(snapshots)
    assert packed.stat().st_size * 5 < plain.stat().st_size


def test_the_format_is_told_by_magic_bytes_not_by_name(tmp_path: Path) -> None:
    named_gz = tmp_path / "plain.jsonl.gz"
    named_plain = tmp_path / "packed.jsonl"
    snapshots = write(named_gz, compress=False)
    write(named_plain, compress=True)
    assert read_recording(named_gz) == read_recording(named_plain) == snapshots


def test_a_gzip_stream_without_its_end_reads_up_to_the_last_flush(tmp_path: Path) -> None:
    path = tmp_path / "killed.jsonl"
    snapshots = write(path, compress=True, close=False)
    with pytest.raises(EOFError):
        gzip.decompress(path.read_bytes())
    assert read_recording(path) == snapshots


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x28\xb5\x2f\xfd" + b"\0" * 64, "zstd-compressed; this gpumon reads plain and gzip recordings"),
        (b"\x1f\x8b\x08\x00" + b"\xff" * 64, "line 1: corrupt gzip data"),
    ],
)
def test_foreign_compression_is_one_clear_error(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_bytes(content)
    with pytest.raises(RecordingError, match=expected):
        read_recording(path)


def test_a_bad_line_mid_replay_ends_it_and_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = RECORDING.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:100]) + "{not json\n" + "".join(lines[100:]))
    replayer = Replayer(iter_recording(path), speed=32, name=path.name)
    delivered = 0
    while replayer.step() is not None:
        delivered += 1
    assert delivered == 99  # lines 2..100; line 101 is the bad one
    assert replayer.error is not None and "line 101: not valid JSON" in replayer.error
    assert "ended at a bad line" in replayer.description


def test_the_description_shows_a_hostile_name_and_line_as_text(tmp_path: Path) -> None:
    path = tmp_path / "run\x1b[2J.jsonl"
    lines = RECORDING.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:40]) + "\x1b]0;owned\x07\n")
    replayer = Replayer(iter_recording(path), name=path.name)
    replayer.skip_to(None)
    replayer.step()
    assert replayer.error is not None and "\x1b" in replayer.error
    assert "\x1b" not in replayer.description and "\\x1b" in replayer.description


def test_skip_to_lands_on_the_last_snapshot_at_that_time() -> None:
    snapshots = read_recording(RECORDING)
    first = snapshots[0].timestamp
    expected = max(i for i, s in enumerate(snapshots) if s.timestamp - first <= 55)
    replayer = Replayer(iter_recording(RECORDING))
    replayer.skip_to(55)
    assert replayer.position == expected
    assert replayer.step() == snapshots[expected]
    past_end = Replayer(iter_recording(RECORDING))
    with pytest.raises(ValueError, match="past the recording's end"):
        past_end.skip_to(10_000)


def gpumon_record(path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpumon", "record", str(path), "--interval", "0.1", *args],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def readable_snapshots(path: Path) -> int:
    try:
        return len(read_recording(path))
    except RecordingError:
        return 0


def test_a_killed_compressed_record_leaves_every_flushed_sample(tmp_path: Path) -> None:
    """A real `gpumon record --compress` child, SIGKILLed once it has written 5 samples: no gzip trailer, but every
    sample written reads back."""
    path = tmp_path / "run.jsonl.gz"
    child = gpumon_record(path, "--compress")
    try:

        def five_samples_written() -> bool:
            assert child.poll() is None, child.communicate()
            return readable_snapshots(path) >= 5

        wait_until(five_samples_written, 60, "the recorder's first 5 samples")
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    snapshots = read_recording(path)
    assert len(snapshots) >= 5
    assert count_snapshots(path) == len(snapshots)


def test_a_stopped_compressed_record_ends_the_gzip_stream(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl.gz"
    child = gpumon_record(path, "--compress", "--duration", "1")
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 0, stderr
    written = int(stderr.split("wrote ")[1].split()[0])
    assert written >= 1
    assert len(gzip.decompress(path.read_bytes()).splitlines()) == written + 1


# ---------------------------------------------------------------------------------------------
# Memory: a replay of a long recording holds one snapshot at a time.

LONG_SNAPSHOTS = 100_000
SHORT_SNAPSHOTS = 2_000


def long_recording(path: Path, count: int) -> int:
    """`count` snapshots: the real 2 x H100 recording's lines over and over, timestamps shifted on; its size."""
    header, *lines = RECORDING.read_bytes().splitlines(keepends=True)
    prefix = b'{"type":"snapshot","timestamp":'
    parts = [line[len(prefix) :].split(b",", 1) for line in lines]
    first = float(parts[0][0])
    span = float(parts[-1][0]) - first + 0.5
    with path.open("wb") as stream:
        stream.write(header)
        for index in range(count):
            lap, at = divmod(index, len(parts))
            timestamp, rest = parts[at]
            stream.write(b"%s%r,%s" % (prefix, float(timestamp) + lap * span, rest))
    return path.stat().st_size


PEAK_SCRIPT = textwrap.dedent("""
    import resource, sys
    from gpumon.sampling.recording import count_snapshots, iter_recording
    from gpumon.sampling.replay import Replayer

    replayer = Replayer(iter_recording(sys.argv[1]), speed=32, name="long")
    replayer.total = count_snapshots(sys.argv[1])
    while replayer.step() is not None:
        pass
    print(replayer.position, replayer.total, replayer.error, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""")


def replay_peak(path: Path) -> tuple[int, int, int]:
    """(snapshots replayed, total counted, peak RSS in KiB) of a child process replaying `path` to its end."""
    result = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(path)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    assert result.returncode == 0, result.stderr
    position, total, error, peak = result.stdout.split()
    assert error == "None"
    return int(position), int(total), int(peak)


@pytest.mark.slow  # about 20 s on the 2-core machine
def test_replaying_a_long_recording_takes_no_more_memory_than_a_short_one(tmp_path: Path) -> None:
    """100,000 snapshots (about 270 MB of JSON) replayed to the end in a child process: its peak RSS is within 20 MiB
    of the peak replaying 2,000 (a list of the 100,000 snapshots would take gigabytes)."""
    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    long_recording(short, SHORT_SNAPSHOTS)
    size = long_recording(long, LONG_SNAPSHOTS)
    assert size > 200 << 20
    short_count, short_total, short_peak = replay_peak(short)
    long_count, long_total, long_peak = replay_peak(long)
    assert (short_count, short_total) == (SHORT_SNAPSHOTS, SHORT_SNAPSHOTS)
    assert (long_count, long_total) == (LONG_SNAPSHOTS, LONG_SNAPSHOTS)
    assert long_peak - short_peak < 20 << 10, (short_peak, long_peak)
