"""A recording that goes bad part-way (gzip corrupt mid-stream) is said in one line and a non-zero exit by `replay`,
`replay --screenshot` and `exporter --replay`; a screenshot is never written over its own recording."""

from __future__ import annotations

import itertools
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpumon.sampling.recording import RecordingError, RecordingWriter, iter_recording

REPOSITORY = Path(__file__).resolve().parents[1]
SOURCE = REPOSITORY / "assets" / "recordings" / "h200x2-tests.jsonl"


def gpumon(*args: str, cwd: Path = REPOSITORY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )


def good_before_damage(path: Path) -> tuple[int, str]:
    """The snapshots the reader gets from `path` before its RecordingError (which it must raise), and its reason."""
    good = 0
    with pytest.raises(RecordingError) as raised:
        for _ in iter_recording(path):
            good += 1
    return good, str(raised.value)


@pytest.fixture
def corrupt(tmp_path: Path) -> tuple[Path, int, str]:
    """80 snapshots of a real 2 x H200 recording, gzip-compressed, 16 bytes flipped 45% of the way in; and how many
    snapshots the reader gets before them."""
    path = tmp_path / "corrupt.jsonl.gz"
    with path.open("wb") as stream:
        writer = RecordingWriter(stream, compress=True)
        for snapshot in itertools.islice(iter_recording(SOURCE), 80):
            writer.write(snapshot)
        writer.close()
    data = bytearray(path.read_bytes())
    middle = len(data) * 45 // 100
    data[middle : middle + 16] = bytes(byte ^ 0xFF for byte in data[middle : middle + 16])
    path.write_bytes(bytes(data))
    good, reason = good_before_damage(path)
    assert 33 < good < 80, "the damage lies past the replayer's first read-ahead, before the end"
    return path, good, reason


def test_a_screenshot_of_a_recording_corrupt_mid_stream_is_refused_in_one_line(
    corrupt: tuple[Path, int, str], tmp_path: Path
) -> None:
    path, good, reason = corrupt
    shot = tmp_path / "shot.svg"
    result = gpumon("replay", str(path), "--screenshot", str(shot))
    assert result.returncode == 1, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"recording truncated/corrupt after {good} samples" in lines[0], result.stderr
    why = reason.rsplit(": ", 1)[-1]  # gzip's CRC, zlib's stream error or a line that is not JSON: what flips hit
    assert why in lines[0], f"the reader's reason is kept: {why!r}"
    assert not shot.exists()


def test_a_replay_that_reaches_the_damage_says_so_when_it_ends(corrupt: tuple[Path, int, str], tmp_path: Path) -> None:
    path, good, _reason = corrupt
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"}
    replay = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "replay", str(path), "--speed", "32"],
        cwd=tmp_path,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + 60
        sent_quit = False
        while replay.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
            if not sent_quit and b"ended at a bad line" in output:
                os.write(master, b"q")
                sent_quit = True
        while True:  # what it printed after leaving the screen
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        assert replay.wait(10) == 1, output[-400:]
        assert f"recording truncated/corrupt after {good} samples".encode() in output, output[-400:]
    finally:
        if replay.poll() is None:
            os.killpg(replay.pid, signal.SIGKILL)
            replay.wait()
        os.close(master)


def test_the_exporter_replaying_a_corrupt_recording_says_so_and_exits_non_zero(corrupt: tuple[Path, int, str]) -> None:
    path, good, _reason = corrupt
    exporter = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "exporter", "--listen", "127.0.0.1:0", "--replay", str(path), "--speed", "32"],
        cwd=REPOSITORY,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert exporter.stderr is not None
        ready, _, _ = select.select([exporter.stderr], [], [], 60)
        line = exporter.stderr.readline() if ready else ""
        assert f"recording truncated/corrupt after {good} samples" in line, line
        exporter.send_signal(signal.SIGTERM)
        assert exporter.wait(30) == 1
    finally:
        if exporter.poll() is None:
            exporter.kill()
            exporter.wait()


@pytest.mark.parametrize("name", ["same path", "symlink", "hard link", "dot path"])
def test_a_screenshot_over_its_own_recording_is_refused(tmp_path: Path, name: str) -> None:
    recording = tmp_path / "rec.jsonl"
    recording.write_bytes((REPOSITORY / "assets" / "recordings" / "h100-demo-slow.jsonl").read_bytes())
    before = recording.read_bytes()
    target = {
        "same path": recording,
        "symlink": tmp_path / "link.svg",
        "hard link": tmp_path / "hard.svg",
        "dot path": tmp_path / "." / "rec.jsonl",
    }[name]
    if name == "symlink":
        target.symlink_to(recording)
    elif name == "hard link":
        os.link(recording, target)
    result = gpumon("replay", str(recording), "--screenshot", str(target), cwd=tmp_path)
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is the recording itself" in lines[0], result.stderr
    assert recording.read_bytes() == before
