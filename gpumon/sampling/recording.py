"""JSON Lines recordings of snapshots: a header line, then one snapshot per line.

The reader trusts nothing in the file: lines are read in bounded chunks up to MAX_LINE_BYTES, nesting is checked
before json.loads, every snapshot is validated against the schema (docs/schema.md) and timestamps must not go
back. The writer writes each line whole, so a full disk leaves only complete lines behind.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from gpumon.sampling.snapshot import SCHEMA_VERSION, Snapshot

RECORDING_FORMAT = "gpumon-recording"
MAX_LINE_BYTES = 8 << 20
"""A snapshot line of a large machine is tens of KiB; a longer line is not a recording (e.g. /dev/zero)."""
MAX_DEPTH = 32
"""JSON nesting a snapshot line may have (it uses 6); deeper would only exhaust the parser's stack."""
_CHUNK_BYTES = 64 << 10
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')


class RecordingError(ValueError):
    """A recording that cannot be read; the message names the file and line."""


class RecordingWriter:
    """Appends snapshots to a JSON Lines file, each line written whole and at once.

    A write that fails (a full disk: ENOSPC, EFBIG, /dev/full) cuts the file back to its last complete line where
    the file can be cut, then raises the OSError: the recording stays readable up to the failure.
    """

    def __init__(self, stream: IO[str], note: str = "") -> None:
        self._stream = stream
        stream.flush()
        self._fd = _descriptor(stream)
        self._end = self._position()
        """Where the last complete line ends (None where the file cannot be cut: a pipe, a terminal)."""
        header = {
            "type": RECORDING_FORMAT,
            "version": SCHEMA_VERSION,
            "hostname": platform.node(),
            "created": time.time(),
            "note": note,
        }
        self._write(header)

    def write(self, snapshot: Snapshot) -> None:
        self._write({"type": "snapshot", **snapshot.to_dict()})

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        try:
            if self._fd is None:
                self._stream.write(line)
                self._stream.flush()
            else:
                _write_all(self._fd, line.encode("utf-8"))
        except OSError:
            self._cut_back()
            raise
        self._end = self._position()

    def _position(self) -> int | None:
        try:
            if self._fd is not None:
                return os.lseek(self._fd, 0, os.SEEK_CUR)
            return self._stream.tell() if self._stream.seekable() else None
        except (OSError, ValueError):
            return None

    def _cut_back(self) -> None:
        """Drop a partly written line: truncate to the end of the last complete one."""
        if self._end is None:
            return
        try:
            if self._fd is not None:
                os.ftruncate(self._fd, self._end)
                os.lseek(self._fd, self._end, os.SEEK_SET)
            else:
                self._stream.seek(self._end)
                self._stream.truncate(self._end)
        except (OSError, ValueError):
            pass  # a device that cannot be cut (/dev/full): the original error is what matters


def _descriptor(stream: IO[str]) -> int | None:
    """The file descriptor under a real file (written directly, past any buffer); None for in-memory streams."""
    try:
        return stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# ---------------------------------------------------------------------------------------------
# Reading.


def iter_recording(path: str | Path) -> Iterator[Snapshot]:
    """Yield the snapshots of a recording; raise RecordingError naming the first bad line and field."""
    path = Path(path)
    try:
        stream = path.open("rb")
    except OSError as error:
        raise RecordingError(f"{path}: cannot open: {error.strerror or error}") from None
    with stream:
        line_number = 0
        previous: tuple[int, float] | None = None
        try:
            for line_number, line in _lines(stream, path):
                record = _parse(path, line_number, line)
                if line_number == 1:
                    _check_header(path, record)
                    continue
                snapshot = _snapshot(path, line_number, record)
                if previous is not None and snapshot.timestamp < previous[1]:
                    raise RecordingError(
                        f"{path} line {line_number}: timestamp: {snapshot.timestamp!r} is earlier than line "
                        f"{previous[0]}'s {previous[1]!r} (timestamps must not go back)"
                    )
                previous = (line_number, snapshot.timestamp)
                yield snapshot
        except OSError as error:
            raise RecordingError(f"{path} line {line_number + 1}: cannot read: {error.strerror or error}") from None
        if line_number == 0:
            raise RecordingError(f"{path} line 1: empty file, not a gpumon recording")
        if line_number == 1:
            raise RecordingError(f"{path} line 2: recording holds no snapshots")


def read_recording(path: str | Path) -> list[Snapshot]:
    return list(iter_recording(path))


def _lines(stream: BinaryIO, path: Path) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line, newline kept, read in chunks: no line may pass MAX_LINE_BYTES."""
    buffer = bytearray()
    number = 1
    while chunk := stream.read(_CHUNK_BYTES):
        searched = len(buffer)
        buffer += chunk
        start = 0
        while (end := buffer.find(b"\n", max(start, searched))) >= 0:
            if end + 1 - start > MAX_LINE_BYTES:
                raise _too_long(path, number)
            yield number, bytes(buffer[start : end + 1])
            number += 1
            start = end + 1
        del buffer[:start]
        if len(buffer) > MAX_LINE_BYTES:
            raise _too_long(path, number)
    if buffer:
        yield number, bytes(buffer)


def _too_long(path: Path, line_number: int) -> RecordingError:
    problem = f"line longer than {MAX_LINE_BYTES >> 20} MiB"
    if line_number == 1:
        problem = f"not a gpumon recording ({problem})"
    return RecordingError(f"{path} line {line_number}: {problem}")


def _too_deep(line: bytes) -> bool:
    """Whether the JSON text nests arrays/objects deeper than MAX_DEPTH (brackets inside strings do not count)."""
    if line.count(b"[") + line.count(b"{") <= MAX_DEPTH:
        return False
    depth = 0
    in_string = False
    escaped = -1
    for match in _STRUCTURE.finditer(line):
        position = match.start()
        if position == escaped:
            continue
        char = line[position]
        if in_string:
            if char == 0x5C:  # backslash: the next character is escaped
                escaped = position + 1
            elif char == 0x22:  # closing quote
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif char in b"]}":
            depth -= 1
    return False


def _parse(path: Path, line_number: int, line: bytes) -> dict[str, Any]:
    where = f"{path} line {line_number}"
    problem = "not valid JSON" if line.endswith(b"\n") else "truncated line (no newline at end of file)"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordingError(f"{where}: not UTF-8 text, not a gpumon recording") from None
    if _too_deep(line):
        problem = f"nested deeper than {MAX_DEPTH} levels"
    else:
        try:
            record = json.loads(text)
        except ValueError:  # JSONDecodeError, or an integer too long to convert
            pass
        else:
            if not isinstance(record, dict):
                raise RecordingError(f"{where}: expected a JSON object")
            return record
    if line_number == 1:
        raise RecordingError(f"{where}: not a gpumon recording ({problem})")
    raise RecordingError(f"{where}: {problem}")


def _check_header(path: Path, record: dict[str, Any]) -> None:
    if record.get("type") != RECORDING_FORMAT:
        raise RecordingError(f"{path} line 1: not a gpumon recording (no '{RECORDING_FORMAT}' header)")
    version = record.get("version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        shown = repr(version)[:40]
        raise RecordingError(f"{path} line 1: recording version {shown}, this gpumon reads {SCHEMA_VERSION}")
    for name, kind, expected in (
        ("hostname", str, "a string"),
        ("note", str, "a string"),
        ("created", (int, float), "a number"),
    ):
        value = record.get(name)
        if name in record and (not isinstance(value, kind) or isinstance(value, bool)):
            raise RecordingError(f"{path} line 1: {name}: expected {expected}, got {repr(value)[:40]}")


def _snapshot(path: Path, line_number: int, record: dict[str, Any]) -> Snapshot:
    if record.get("type") != "snapshot":
        raise RecordingError(f"{path} line {line_number}: expected a snapshot record")
    try:
        return Snapshot.from_dict({key: value for key, value in record.items() if key != "type"})
    except ValueError as error:
        raise RecordingError(f"{path} line {line_number}: {error}") from None
