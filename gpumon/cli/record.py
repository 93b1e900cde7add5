"""`gpumon record`: samples to a JSON Lines file (gzip with --compress) until --duration passes or Ctrl+C."""

from __future__ import annotations

import argparse
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from gpumon.cli.base import CliError, Subparsers, positive_float, positive_seconds, subcommand
from gpumon.private_files import create_private_file
from gpumon.sampling.interval import MAX_RECORD_INTERVAL_S, MIN_INTERVAL_S, interval_in_range
from gpumon.sampling.snapshot import Snapshot


def record_interval(text: str) -> float:
    value = positive_float(text)
    if not interval_in_range(value, MAX_RECORD_INTERVAL_S):
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_INTERVAL_S:g}..{MAX_RECORD_INTERVAL_S:g} seconds")
    return value


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "record",
        help="record samples to a JSON Lines file",
        description="Record samples to a JSON Lines file until --duration passes or Ctrl+C.",
        handler=run_record,
    )
    parser.add_argument("file", type=Path, help="output file, created 0600 (refused if it exists, unless --force)")
    parser.add_argument(
        "--duration", type=positive_seconds, default=None, help="seconds to record (default: until Ctrl+C)"
    )
    parser.add_argument(
        "--interval",
        type=record_interval,
        default=1.0,
        help=f"seconds between samples, {MIN_INTERVAL_S:g} to {MAX_RECORD_INTERVAL_S:g} (default 1)",
    )
    parser.add_argument(
        "--compress",
        action="store_true",
        help="write gzip (about a tenth of the size; flushed after every sample, so a killed recorder leaves a "
        "readable file); replay and exporter --replay read both",
    )
    parser.add_argument("--note", default="", help="free text stored in the header (device, workload...)")
    parser.add_argument(
        "--no-jobs",
        action="store_true",
        help="do not record the hooked jobs (by default their steps, budgets, stack samples and the advisor's finding "
        "go with each sample, so a replay shows the job pane and the finding)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")


def _cannot_write(path: Path, error: OSError) -> CliError:
    return CliError(f"cannot write {path}: {error.strerror or error}")


def run_record(args: argparse.Namespace) -> int:
    path: Path = args.file
    stream = _open_recording(path, args.force)
    try:
        with stream:
            count, seconds = _record(stream, args)
    except OSError as error:  # the disk filled up (ENOSPC), or the file went away: every complete line stays
        raise _cannot_write(path, error) from None
    print(f"gpumon: wrote {count} samples over {seconds:.1f} s to {path}", file=sys.stderr)
    return 0


def _open_recording(path: Path, force: bool) -> BinaryIO:
    """A new file, mode 0600 (a recording holds full command lines), never reached through a symlink.

    With `force` an existing regular file is replaced by a new one (its mode and owner never change); a device or
    pipe (/dev/full, a FIFO) is written as it is."""
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    except OSError as error:  # a directory we may not search (EACCES)
        raise _cannot_write(path, error) from None
    try:
        if existing is None:
            return os.fdopen(create_private_file(str(path)), "wb")
        if not force:
            raise CliError(f"{path} exists; pass --force to overwrite it")
        if stat.S_ISLNK(existing.st_mode):
            raise CliError(f"cannot write {path}: it is a symlink, which gpumon does not follow")
        if stat.S_ISREG(existing.st_mode):
            os.unlink(path)
            return os.fdopen(create_private_file(str(path)), "wb")
        return os.fdopen(os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "wb")
    except OSError as error:
        raise _cannot_write(path, error) from None


def _record(stream: BinaryIO, args: argparse.Namespace) -> tuple[int, float]:
    """Write samples to `stream` until the duration passes, Ctrl+C or SIGTERM; (samples written, seconds).

    An OSError writing a sample stops the recording and is raised here, on the main thread."""
    from gpumon.cli.record_jobs import JobRecorder
    from gpumon.jobs.recorded import JOB_DATA_VERSION
    from gpumon.sampling.nvml import GpuCollector
    from gpumon.sampling.recording import RecordingWriter
    from gpumon.sampling.sampler import Sampler

    done = threading.Event()
    failures: list[OSError] = []
    count = 0
    job_data = None if args.no_jobs else JOB_DATA_VERSION
    writer = RecordingWriter(stream, note=args.note, compress=args.compress, job_data=job_data)
    sampler = Sampler(interval=args.interval, gpu=GpuCollector(graphics_activity=True))  # every field, for replays
    jobs = None if args.no_jobs else JobRecorder(track=sampler.track_pids)

    def write(snapshot: Snapshot) -> None:
        nonlocal count
        if failures:
            return
        try:
            writer.write(snapshot, jobs.entries(snapshot) if jobs is not None else ())
        except OSError as error:
            failures.append(error)
            done.set()
            return
        count += 1

    signal.signal(signal.SIGTERM, lambda *_: done.set())
    if jobs is not None:
        jobs.start()
    sampler.start(write)
    started = time.monotonic()
    try:
        done.wait(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.stop()
        if jobs is not None:
            jobs.stop()
    if failures:
        raise failures[0]
    writer.close()
    return count, time.monotonic() - started
