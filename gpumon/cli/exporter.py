"""`gpumon exporter`: serve GPU, process and hooked-job metrics to Prometheus on /metrics."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import CliError, Subparsers, interval_seconds, positive_float, subcommand
from gpumon.exporter.pod_resources import DEFAULT_SOCKET as POD_RESOURCES_SOCKET
from gpumon.sampling.gpu_choice import add_gpu_choice_arguments, chosen_gpus, only_gpus

if TYPE_CHECKING:
    from gpumon.exporter.jobs import JobMetrics
    from gpumon.sampling.snapshot import Snapshot
    from gpumon.sampling.source import SnapshotSource

DEFAULT_PORT = 19400
"""Outside 9100-9999, the Prometheus wiki's exporter range (full; 9400 there is dcgm-exporter's), so both run on one
node; see docs/deploy/README.md."""
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
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
        help=f"address to serve on (default {DEFAULT_LISTEN}; ':{DEFAULT_PORT}' for every address (then use TLS and "
        "basic auth), port 0 for a free one)",
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
    add_gpu_choice_arguments(parser, "export")
    parser.add_argument(
        "--full-command",
        action="store_true",
        help="label processes with their whole command line (may hold secrets; default: program and script name only)",
    )
    parser.add_argument(
        "--per-worker-series",
        action="store_true",
        help="series for each worker process (e.g. DataLoader workers; new pids, so new series, at every restart); "
        "default: per GPU process, its workers' count, CPU and RSS together",
    )
    parser.add_argument(
        "--dcgm-names",
        action="store_true",
        help="also serve dcgm-exporter's DCGM_FI_* names, units and labels for the fields gpumon samples "
        "(dashboards made for dcgm-exporter then read gpumon)",
    )
    parser.add_argument("--no-jobs", action="store_true", help="do not attach to hooked jobs")
    parser.add_argument(
        "--pod-resources-socket",
        default=POD_RESOURCES_SOCKET,
        metavar="PATH",
        help="the kubelet's pod-resources socket, read for the pod, namespace and container holding each GPU "
        f"(default {POD_RESOURCES_SOCKET}; needs grpcio, the k8s extra; '' for none: pods then come from cgroups)",
    )
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

    from gpumon.cli.replay import EXIT_DAMAGED, damage
    from gpumon.exporter.collector import SnapshotCollector
    from gpumon.exporter.labels import PlacementCache
    from gpumon.exporter.pod_resources import PodResourcesWatcher
    from gpumon.exporter.pods import ContainerNames, PodAttribution
    from gpumon.exporter.server import MetricsServer, ServerConfigError, TlsFiles, read_basic_auth_file
    from gpumon.sampling.replay import Replayer

    if (args.tls_cert is None) != (args.tls_key is None):
        raise CliError("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        raise CliError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = TlsFiles(args.tls_cert, args.tls_key, args.tls_client_ca) if args.tls_cert is not None else None
    source = _source(args)
    replay = args.replay is not None
    jobs = None if args.no_jobs else _job_metrics(args.full_command, source)
    watcher = PodResourcesWatcher(args.pod_resources_socket) if args.pod_resources_socket and not replay else None
    collector = SnapshotCollector(
        args.host_label,
        full_command=args.full_command,
        per_worker_series=args.per_worker_series,
        dcgm_names=args.dcgm_names,
        extra=jobs,
        placements=PlacementCache(enabled=not replay, complete=ContainerNames().fill),
        source="replay" if replay else "live",
        pods=PodAttribution(watcher),
    )

    chosen = chosen_gpus(args, os.environ)
    damage_said: list[str] = []

    def post(snapshot: Snapshot) -> None:
        if isinstance(source, Replayer) and not damage_said and (damaged := damage(source)) is not None:
            damage_said.append(damaged)
            print(f"gpumon exporter: {damaged}", file=sys.stderr, flush=True)
        snapshot = only_gpus(snapshot, chosen)
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
        if watcher is not None:
            watcher.start()
        print(f"gpumon exporter: serving {server.url} ({source.description})", flush=True)
        _wait(stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if watcher is not None:
            watcher.stop()
        if jobs is not None:
            jobs.stop()
        source.stop()
        server.close()
    return EXIT_DAMAGED if damage_said else 0


REPLAY_UPDATE_S = 1.0
"""How often a replay's job figures are worked out again (the recording's entries arrive with each snapshot)."""


def _wait(stop: threading.Event) -> None:
    """Until SIGTERM (exit 0) or Ctrl+C (exit 130); woken now and then so Python sees the signal."""
    while not stop.wait(0.5):
        pass


def _source(args: argparse.Namespace) -> SnapshotSource:
    if args.replay is None:
        from gpumon.sampling.nvml import GpuCollector
        from gpumon.sampling.sampler import Sampler

        return Sampler(interval=args.interval, gpu=GpuCollector(graphics_activity=args.dcgm_names))
    from gpumon.sampling.recording import RecordingError, iter_samples
    from gpumon.sampling.replay import Replayer

    try:
        return Replayer(iter_samples(args.replay), speed=args.speed, name=args.replay.name)
    except (RecordingError, ValueError) as error:  # ValueError: no snapshots
        raise CliError(str(error)) from None


def _job_metrics(full_command: bool, source: SnapshotSource) -> JobMetrics:
    from gpumon.exporter.jobs import JobMetrics
    from gpumon.exporter.labels import PlacementCache
    from gpumon.exporter.pods import ContainerNames
    from gpumon.sampling.replay import Replayer

    if isinstance(source, Replayer):  # the jobs the recording holds, fed as the replay reaches them
        from gpumon.exporter.replayed_jobs import ReplayedJobMetrics
        from gpumon.jobs.recorded import RecordedJobs

        recorded = RecordedJobs()
        source.on_jobs.append(recorded.add)
        return ReplayedJobMetrics(
            recorded,
            full_command=full_command,
            placements=PlacementCache(enabled=False),
            update_interval=REPLAY_UPDATE_S,
        )

    track = getattr(source, "track_pids", None)  # the live Sampler follows the jobs' processes
    placements = PlacementCache(complete=ContainerNames().fill)  # its own: the jobs thread reads it
    return JobMetrics(full_command=full_command, track=track, placements=placements)
