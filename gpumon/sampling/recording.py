"""JSON Lines recordings of snapshots: a header line, then one snapshot per line; plain or gzip-compressed.

The reader streams: it holds one line at a time, so memory does not grow with the file. It tells gzip from plain text
by the first bytes, not the name. It trusts nothing in the file: lines are read in bounded chunks up to
MAX_LINE_BYTES, nesting is checked before json.loads, every snapshot is validated against the schema (docs/schema.md)
and timestamps must not go back. The writer writes each line whole (compressed: each line and a zlib sync flush), so a
full disk or a killed recorder leaves only complete lines behind.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import platform
import re
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from gpumon.sampling.processes import keep_top_processes
from gpumon.sampling.snapshot import SCHEMA_VERSION, Snapshot

RECORDING_FORMAT = "gpumon-recording"
MAX_LINE_BYTES = 8 << 20
"""A snapshot line of a large machine is tens of KiB; a longer line is not a recording (e.g. /dev/zero)."""
MAX_DEPTH = 32
"""JSON nesting a snapshot line may have (it uses 6); deeper would only exhaust the parser's stack."""
_CHUNK_BYTES = 64 << 10
_STRUCTURE = re.compile(rb'[\[\]{}"\\]')
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""Recognised only to say so: zstd has no module in the standard library before Python 3.14."""


JOB_DATA_VERSIONS = frozenset({1})
"""The formats of job entries (gpumon/jobs/recorded.py) this reader hands on; others are left out, the snapshots
replayed without them."""
MAX_JOB_ENTRIES = 64
"""Job entries a snapshot line may hold (one per hooked process)."""


class RecordingError(ValueError):
    """A recording that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class RecordedSample:
    """One snapshot line: the snapshot and the hooked jobs' entries written beside it (none in older recordings)."""

    snapshot: Snapshot
    jobs: tuple[Mapping[str, Any], ...] = ()


class RecordingWriter:
    """Appends snapshots to a JSON Lines file, each line written whole and at once.

    A write that fails (a full disk: ENOSPC, EFBIG, /dev/full) cuts the file back to its last complete line where
    the file can be cut, then raises the OSError: the recording stays readable up to the failure.

    `compress` writes gzip (a real file only): each line is followed by a zlib sync flush and written with it in one
    write, so a recorder killed at any moment leaves a stream that decompresses to every line written; close() adds
    the gzip trailer.
    """

    def __init__(self, stream: IO[Any], note: str = "", compress: bool = False, job_data: int | None = None) -> None:
        self._stream = stream
        stream.flush()
        self._fd = _descriptor(stream)
        self._compressor: Any = None
        self._broken: OSError | None = None
        if compress:
            if self._fd is None:
                raise ValueError("a compressed recording needs a real file")
            self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 16+15: a gzip header and trailer
        self._end = self._position()
        """Where the last complete line ends (None where the file cannot be cut: a pipe, a terminal)."""
        header = {
            "type": RECORDING_FORMAT,
            "version": SCHEMA_VERSION,
            "hostname": platform.node(),
            "created": time.time(),
            "note": note,
        }
        if job_data is not None:
            header["job_data"] = job_data
        self._write(header)

    def write(self, snapshot: Snapshot, jobs: Sequence[Mapping[str, Any]] = ()) -> None:
        """One snapshot line, with the hooked jobs' entries (`job_data` in the header says their format)."""
        record = {"type": "snapshot", **snapshot.to_dict()}
        if jobs:
            record["jobs"] = list(jobs)
        self._write(record)

    def close(self) -> None:
        """End a compressed stream with its gzip trailer (the file stays the caller's to close)."""
        if self._compressor is not None and self._broken is None:
            self._put(self._compressor.flush(zlib.Z_FINISH))
            self._compressor = None

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        if self._compressor is None:
            self._put(line)
        elif self._broken is not None:
            raise self._broken  # the compressor holds what the failed write lost: the stream cannot go on
        else:
            self._put(self._compressor.compress(line.encode("utf-8")) + self._compressor.flush(zlib.Z_SYNC_FLUSH))

    def _put(self, data: str | bytes) -> None:
        try:
            if self._fd is None:
                assert isinstance(data, str)
                self._stream.write(data)
                self._stream.flush()
            else:
                _write_all(self._fd, data.encode("utf-8") if isinstance(data, str) else data)
        except OSError as error:
            self._cut_back()
            if self._compressor is not None:
                self._broken = error
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


def _descriptor(stream: IO[Any]) -> int | None:
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
    return (sample.snapshot for sample in iter_samples(path))


def iter_samples(path: str | Path) -> Iterator[RecordedSample]:
    """Yield each snapshot of a recording with its job entries (where the header's `job_data` is a format this reader
    knows); raise RecordingError naming the first bad line and field."""
    path = Path(path)
    try:
        raw = path.open("rb")
    except OSError as error:
        raise RecordingError(f"{path}: cannot open: {error.strerror or error}") from None
    with raw:
        line_number = 0
        previous: tuple[int, float] | None = None
        with_jobs = False
        try:
            for line_number, line in _lines(_decoded(raw, path), path):
                record = _parse(path, line_number, line)
                if line_number == 1:
                    _check_header(path, record)
                    with_jobs = record.get("job_data") in JOB_DATA_VERSIONS
                    continue
                snapshot = _snapshot(path, line_number, record)
                if previous is not None and snapshot.timestamp < previous[1]:
                    raise RecordingError(
                        f"{path} line {line_number}: timestamp: {snapshot.timestamp!r} is earlier than line "
                        f"{previous[0]}'s {previous[1]!r} (timestamps must not go back)"
                    )
                previous = (line_number, snapshot.timestamp)
                yield RecordedSample(snapshot, _job_entries(path, line_number, record) if with_jobs else ())
        except (gzip.BadGzipFile, zlib.error) as error:
            raise RecordingError(f"{path} line {line_number + 1}: corrupt gzip data ({error})") from None
        except OSError as error:
            raise RecordingError(f"{path} line {line_number + 1}: cannot read: {error.strerror or error}") from None
        if line_number == 0:
            raise RecordingError(f"{path} line 1: empty file, not a gpumon recording")
        if line_number == 1:
            raise RecordingError(f"{path} line 2: recording holds no snapshots")


def read_recording(path: str | Path) -> list[Snapshot]:
    """Every snapshot in a list: for tests and short recordings; the CLI streams with iter_recording."""
    return list(iter_recording(path))


def count_snapshots(path: str | Path) -> int | None:
    """The snapshot lines of a recording, in one streaming pass that parses nothing (a progress total); None for
    what is not a regular file (a pipe, /dev/zero). The one check it makes is the cheap one for the commonest damage,
    a last line cut short (RecordingError naming it). Other problems are iter_recording's to name when it reaches
    them."""
    path = Path(path)
    if not path.is_file():
        return None
    lines = 0
    last = b"\n"
    try:
        with path.open("rb") as raw:
            for chunk in _chunks(_decoded(raw, path)):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except (OSError, zlib.error):
        return max(0, lines - 1)
    if last != b"\n":
        raise RecordingError(f"{path} line {lines + 1}: truncated line (no newline at end of file)")
    return max(0, lines - 1)


def _decoded(raw: io.BufferedReader, path: Path) -> io.BufferedIOBase:
    """The recording's bytes: `raw` itself, or a gzip reader over it when it starts with the gzip magic."""
    magic = raw.peek(4)[:4]
    if magic.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic == ZSTD_MAGIC:
        raise RecordingError(f"{path}: zstd-compressed; this gpumon reads plain and gzip recordings (zstd -d it first)")
    return raw


def _chunks(stream: io.BufferedIOBase) -> Iterator[bytes]:
    """The stream's bytes in chunks; a gzip stream without its end (a recorder killed mid-run) ends quietly.

    read1: one read of the file each, so the data before a gzip stream's missing end is returned before EOFError."""
    while True:
        try:
            chunk = stream.read1(_CHUNK_BYTES)
        except EOFError:  # "Compressed file ended before the end-of-stream marker was reached"
            return
        if not chunk:
            return
        yield chunk


def _lines(stream: io.BufferedIOBase, path: Path) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line, newline kept, read in chunks: no line may pass MAX_LINE_BYTES."""
    buffer = bytearray()
    number = 1
    for chunk in _chunks(stream):
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


def _job_entries(path: Path, line_number: int, record: dict[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """The line's job entries: a list of objects, each with its process's pid; what they hold is read later as the
    hook's messages are (a field of the wrong kind left out)."""
    entries = record.get("jobs", [])
    where = f"{path} line {line_number}: jobs"
    if not isinstance(entries, list):
        raise RecordingError(f"{where}: expected a list, got {type(entries).__name__}")
    if len(entries) > MAX_JOB_ENTRIES:
        raise RecordingError(f"{where}: {len(entries)} entries, at most {MAX_JOB_ENTRIES}")
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise RecordingError(f"{where}[{index}]: expected an object")
        pid = entry.get("pid")
        if type(pid) is not int or not 0 < pid < 1 << 63:
            raise RecordingError(f"{where}[{index}].pid: expected a pid, got {repr(pid)[:40]}")
    return tuple(entries)


def _snapshot(path: Path, line_number: int, record: dict[str, Any]) -> Snapshot:
    if record.get("type") != "snapshot":
        raise RecordingError(f"{path} line {line_number}: expected a snapshot record")
    try:
        snapshot = Snapshot.from_dict({key: value for key, value in record.items() if key != "type"})
    except ValueError as error:
        raise RecordingError(f"{path} line {line_number}: {error}") from None
    processes = keep_top_processes(snapshot.processes)  # a recording from elsewhere may hold any number
    return snapshot if processes is snapshot.processes else replace(snapshot, processes=processes)
