"""`gpumon exporter`: serve GPU, process and hooked-job metrics to Prometheus on /metrics."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import CliError, Subparsers, interval_seconds, positive_float, subcommand

if TYPE_CHECKING:
    from gpumon.exporter.jobs import JobMetrics
    from gpumon.sampling.snapshot import Snapshot
    from gpumon.sampling.source import SnapshotSource

DEFAULT_LISTEN = "127.0.0.1:9400"
DEFAULT_INTERVAL = 5.0
"""Seconds between samples: a few per 15 s scrape; the energy counter integrates power over them."""
DESCRIPTION = (
    "Serve /metrics for Prometheus: per GPU (utilization, memory, GPM activity, PCIe, power, energy, clocks, "
    "throttle reasons), per GPU process (memory, SM, CPU, RSS; command reduced to program and script) and per hooked "
    "job (step time, data-wait share, samples/s, the advisor's finding). Listens on 127.0.0.1 unless told otherwise."
)


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers, "exporter", help="serve metrics to Prometheus", description=DESCRIPTION, handler=run_exporter
    )
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN}; ':9400' for every address, port 0 for a free one)",
    )
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=DEFAULT_INTERVAL,
        help=f"seconds between samples (default {DEFAULT_INTERVAL:g})",
    )
    parser.add_argument(
        "--host-label",
        type=_label,
        default=None,
        metavar="NAME",
        help="the host label (default: this machine's name, or the recording's)",
    )
    parser.add_argument(
        "--full-command",
        action="store_true",
        help="label processes with their whole command line (may hold secrets; default: program and script name only)",
    )
    parser.add_argument("--no-jobs", action="store_true", help="do not attach to hooked jobs")
    parser.add_argument(
        "--replay",
        type=Path,
        metavar="FILE",
        help="export a recording (`gpumon record`) instead of this machine: a simulated node",
    )
    parser.add_argument("--speed", type=positive_float, default=1.0, help="replay speed (with --replay)")
    tls = parser.add_argument_group("TLS and authentication")
    tls.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate (needs --tls-key)")
    tls.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    tls.add_argument("--tls-client-ca", metavar="PEM", help="require client certificates signed by this CA")
    tls.add_argument(
        "--basic-auth-file",
        metavar="FILE",
        help="require HTTP basic auth with the one 'user:password' line of FILE (mode 600)",
    )


def _label(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the host label must not be empty")
    return text


def run_exporter(args: argparse.Namespace) -> int:
    from prometheus_client.registry import CollectorRegistry

    from gpumon.exporter.collector import SnapshotCollector
    from gpumon.exporter.labels import PlacementCache
    from gpumon.exporter.server import MetricsServer, ServerConfigError, TlsFiles, read_basic_auth_file

    if (args.tls_cert is None) != (args.tls_key is None):
        raise CliError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise CliError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert is not None else None
    source = _source(args)
    replay = args.replay is not None
    jobs = None if args.no_jobs or replay else _job_metrics(args.full_command, source)
    collector = SnapshotCollector(
        args.host_label,
        full_command=args.full_command,
        extra=jobs,
        placements=PlacementCache(enabled=not replay),
        source="replay" if replay else "live",
    )

    def post(snapshot: Snapshot) -> None:
        collector.on_snapshot(snapshot)
        if jobs is not None:
            jobs.on_snapshot(snapshot)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        auth = read_basic_auth_file(args.basic_auth_file) if args.basic_auth_file is not None else None
        server = MetricsServer(registry, args.listen, tls=tls, basic_auth=auth)
    except ServerConfigError as error:
        raise CliError(str(error)) from None
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    try:
        server.start()
        source.start(post)
        if jobs is not None:
            jobs.start()
        print(f"gpumon exporter: serving {server.url} ({source.description})", flush=True)
        _wait(stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if jobs is not None:
            jobs.stop()
        source.stop()
        server.close()
    return 0


def _wait(stop: threading.Event) -> None:
    """Until SIGTERM (exit 0) or Ctrl+C (exit 130); woken now and then so Python sees the signal."""
    while not stop.wait(0.5):
        pass


def _source(args: argparse.Namespace) -> SnapshotSource:
    if args.replay is None:
        from gpumon.sampling.sampler import Sampler

        return Sampler(interval=args.interval)
    from gpumon.sampling.recording import RecordingError, iter_recording
    from gpumon.sampling.replay import Replayer

    try:
        return Replayer(iter_recording(args.replay), speed=args.speed, name=args.replay.name)
    except (RecordingError, ValueError) as error:  # ValueError: no snapshots
        raise CliError(str(error)) from None


def _job_metrics(full_command: bool, source: SnapshotSource) -> JobMetrics:
    from gpumon.exporter.jobs import JobMetrics

    track = getattr(source, "track_pids", None)  # the live Sampler follows the jobs' processes
    return JobMetrics(full_command=full_command, track=track)
