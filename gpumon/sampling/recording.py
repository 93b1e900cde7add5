"""JSON Lines recordings of snapshots: a header line, then one snapshot per line."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from gpumon.sampling.snapshot import SCHEMA_VERSION, Snapshot

RECORDING_FORMAT = "gpumon-recording"


class RecordingError(ValueError):
    """A recording that cannot be read; the message names the file and line."""


class RecordingWriter:
    """Appends snapshots to a JSON Lines file, flushing each line so an interrupted run loses nothing."""

    def __init__(self, stream: IO[str], note: str = "") -> None:
        self._stream = stream
        header = {
            "type": RECORDING_FORMAT,
            "version": SCHEMA_VERSION,
            "hostname": socket.gethostname(),
            "created": time.time(),
            "note": note,
        }
        self._write(header)

    def write(self, snapshot: Snapshot) -> None:
        self._write({"type": "snapshot", **snapshot.to_dict()})

    def _write(self, record: dict) -> None:
        self._stream.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._stream.flush()


def iter_recording(path: str | Path) -> Iterator[Snapshot]:
    """Yield the snapshots of a recording; raise RecordingError naming the first bad line."""
    path = Path(path)
    try:
        stream = path.open(encoding="utf-8")
    except OSError as error:
        raise RecordingError(f"{path}: cannot open: {error.strerror or error}") from None
    with stream:
        line_number = 0
        try:
            for line_number, line in enumerate(stream, start=1):
                record = _parse(path, line_number, line)
                if line_number == 1:
                    _check_header(path, record)
                    continue
                if record.get("type") != "snapshot":
                    raise RecordingError(f"{path}: line {line_number}: expected a snapshot record")
                try:
                    yield Snapshot.from_dict({k: v for k, v in record.items() if k != "type"})
                except ValueError as error:
                    raise RecordingError(f"{path}: line {line_number}: {error}") from None
        except UnicodeDecodeError:
            raise RecordingError(f"{path}: line {line_number + 1}: not UTF-8 text, not a gpumon recording") from None
        if line_number == 0:
            raise RecordingError(f"{path}: line 1: empty file, not a gpumon recording")
        if line_number == 1:
            raise RecordingError(f"{path}: line 2: recording holds no snapshots")


def read_recording(path: str | Path) -> list[Snapshot]:
    return list(iter_recording(path))


def _parse(path: Path, line_number: int, line: str) -> dict:
    if not line.endswith("\n"):
        problem = "truncated line (no newline at end of file)"
    else:
        problem = "not valid JSON"
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        if line_number == 1:
            raise RecordingError(f"{path}: line 1: not a gpumon recording ({problem})") from None
        raise RecordingError(f"{path}: line {line_number}: {problem}") from None
    if not isinstance(record, dict):
        raise RecordingError(f"{path}: line {line_number}: expected a JSON object")
    return record


def _check_header(path: Path, record: dict) -> None:
    if record.get("type") != RECORDING_FORMAT:
        raise RecordingError(f"{path}: line 1: not a gpumon recording (no '{RECORDING_FORMAT}' header)")
    version = record.get("version")
    if version != SCHEMA_VERSION:
        raise RecordingError(f"{path}: line 1: recording version {version!r}, this gpumon reads {SCHEMA_VERSION}")
