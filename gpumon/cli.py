"""Command line: the dashboard by default, and the snapshot, record and replay subcommands."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from gpumon import __version__
from gpumon.sampling.source import MAX_INTERVAL, MIN_INTERVAL

EXIT_USAGE = 2


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code 2."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", run_dashboard)
    try:
        return handler(args)
    except CliError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpumon",
        description="Live dashboard of GPUs, CPU, GPU processes and disks: why is my GPU underused?",
    )
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
    add_interval_argument(parser)
    parser.set_defaults(handler=run_dashboard)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    snapshot = commands.add_parser(
        "snapshot", help="print one complete sample and exit", description="Print one complete sample and exit."
    )
    snapshot.add_argument("--json", action="store_true", help="print JSON (schema: docs/schema.md)")
    snapshot.add_argument(
        "--window", type=positive_seconds, default=0.5, help="seconds between the two readings rates are taken over"
    )
    snapshot.set_defaults(handler=run_snapshot)

    record = commands.add_parser(
        "record",
        help="record samples to a JSON Lines file",
        description="Record samples to a JSON Lines file until --duration passes or Ctrl+C.",
    )
    record.add_argument("file", type=Path, help="output file (refused if it exists, unless --force)")
    record.add_argument("--duration", type=positive_seconds, default=None, help="seconds to record (default: until Ctrl+C)")
    add_interval_argument(record)
    record.add_argument("--note", default="", help="free text stored in the header (device, workload...)")
    record.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    record.set_defaults(handler=run_record)

    replay = commands.add_parser(
        "replay", help="open the dashboard on a recording", description="Open the dashboard on a recording."
    )
    replay.add_argument("file", type=Path, help="a file written by `gpumon record`")
    replay.add_argument("--speed", type=positive_float, default=1.0, help="playback speed (+/- change it live)")
    replay.set_defaults(handler=run_replay)
    return parser


def add_interval_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=1.0,
        help=f"seconds between samples, {MIN_INTERVAL:g} to {MAX_INTERVAL:g} (default 1)",
    )


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


positive_seconds = positive_float


def interval_seconds(text: str) -> float:
    value = positive_float(text)
    if not MIN_INTERVAL <= value <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_INTERVAL:g}..{MAX_INTERVAL:g} seconds")
    return value


def run_dashboard(args: argparse.Namespace) -> int:
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    app = GpumonApp(Sampler(interval=args.interval))
    app.run()
    return app.return_code or 0


def run_snapshot(args: argparse.Namespace) -> int:
    from gpumon.sampling.sampler import sample_once

    snapshot = sample_once(window=args.window)
    if args.json:
        json.dump(snapshot.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from gpumon.sampling.summary import describe_snapshot

        print(describe_snapshot(snapshot))
    return 0


def run_record(args: argparse.Namespace) -> int:
    from gpumon.sampling.recording import RecordingWriter
    from gpumon.sampling.sampler import Sampler

    path: Path = args.file
    if path.exists() and not args.force:
        raise CliError(f"{path} exists; pass --force to overwrite it")
    try:
        stream = path.open("w", encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from None
    done = threading.Event()
    count = 0

    def write(snapshot) -> None:
        nonlocal count
        writer.write(snapshot)
        count += 1

    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with stream:
        writer = RecordingWriter(stream, note=args.note)
        sampler = Sampler(interval=args.interval)
        sampler.start(write)
        started = time.monotonic()
        try:
            done.wait(args.duration)
        except KeyboardInterrupt:
            pass
        finally:
            sampler.stop()
    print(f"gpumon: wrote {count} samples over {time.monotonic() - started:.1f} s to {path}", file=sys.stderr)
    return 0


def run_replay(args: argparse.Namespace) -> int:
    from gpumon.sampling.recording import RecordingError, read_recording
    from gpumon.sampling.replay import Replayer
    from gpumon.tui.app import GpumonApp

    try:
        snapshots = read_recording(args.file)
    except RecordingError as error:
        raise CliError(str(error)) from None
    app = GpumonApp(Replayer(snapshots, speed=args.speed, name=args.file.name))
    app.run()
    return app.return_code or 0
