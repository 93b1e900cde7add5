"""Tests of the JSON Lines recording format: round trip and one-line errors naming the line."""

from __future__ import annotations

import io
import json

import pytest

from gpumon.sampling.recording import RecordingError, RecordingWriter, read_recording
from gpumon.sampling.snapshot import CpuSample, GpuSample, ProcessSample, Snapshot


def sample(timestamp: float) -> Snapshot:
    worker = ProcessSample(pid=11, ppid=10, command="python train.py", cpu_percent=99.0)
    job = ProcessSample(pid=10, gpu_indices=(0,), gpu_memory=2**30, command="python train.py", children=(worker,))
    gpu = GpuSample(0, "GPU-abc", "NVIDIA H100", utilization_gpu=35.0, throttle_reasons=("sw_power_cap",))
    return Snapshot(timestamp=timestamp, gpus=(gpu,), cpu=CpuSample(per_core=(1.0, 2.0), total=1.5), processes=(job,))


def write(path, snapshots) -> None:
    with path.open("w") as stream:
        writer = RecordingWriter(stream, note="test")
        for snapshot in snapshots:
            writer.write(snapshot)


def test_round_trip_preserves_every_field(tmp_path):
    path = tmp_path / "run.jsonl"
    snapshots = [sample(1.0), sample(2.0)]
    write(path, snapshots)
    assert read_recording(path) == snapshots


def test_truncated_last_line_is_reported_with_its_number(tmp_path):
    path = tmp_path / "run.jsonl"
    write(path, [sample(1.0), sample(2.0)])
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    with pytest.raises(RecordingError, match=r"line 3: truncated"):
        read_recording(path)


def test_foreign_json_lines_file_is_refused_on_line_one(tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text('{"event": "something else"}\n')
    with pytest.raises(RecordingError, match=r"line 1: not a gpumon recording"):
        read_recording(path)


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "blob.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(RecordingError, match=r"line 1"):
        read_recording(path)


def test_bad_snapshot_record_names_its_line(tmp_path):
    path = tmp_path / "run.jsonl"
    write(path, [sample(1.0)])
    with path.open("a") as stream:
        stream.write(json.dumps({"type": "snapshot", "gpus": []}) + "\n")
    with pytest.raises(RecordingError, match=r"line 3: timestamp: missing"):
        read_recording(path)


def test_header_only_and_empty_files_are_refused(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(RecordingError, match="line 1: empty"):
        read_recording(empty)
    header_only = tmp_path / "header.jsonl"
    write(header_only, [])
    with pytest.raises(RecordingError, match="line 2: recording holds no snapshots"):
        read_recording(header_only)


def test_writer_flushes_each_line():
    stream = io.StringIO()
    writer = RecordingWriter(stream)
    writer.write(sample(1.0))
    lines = stream.getvalue().splitlines()
    assert json.loads(lines[0])["type"] == "gpumon-recording"
    assert json.loads(lines[1])["type"] == "snapshot"
