"""`gpumon fleet`: the fleet view read from Prometheus (every host's GPUs, jobs grouped across hosts)."""

from __future__ import annotations

import argparse

from gpumon.cli.base import CliError, Subparsers, interval_seconds, subcommand

DEFAULT_INTERVAL = 5.0
DESCRIPTION = (
    "Read what gpumon exporters sent to Prometheus and show it: one row per host and GPU (utilization, SM activity, "
    "memory, each with its recent graph on a 0-100% scale), and hooked jobs grouped across hosts by torchrun run id "
    "with per-rank step time and data wait, the straggler rank and the job's finding."
)


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers, "fleet", help="the fleet view, read from Prometheus", description=DESCRIPTION, handler=run_fleet
    )
    parser.add_argument(
        "--prometheus", required=True, metavar="URL", help="Prometheus's base URL, e.g. http://127.0.0.1:9090"
    )
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=DEFAULT_INTERVAL,
        help=f"seconds between reads (default {DEFAULT_INTERVAL:g})",
    )


def run_fleet(args: argparse.Namespace) -> int:
    from gpumon.fleet import PromClient

    try:
        client = PromClient(args.prometheus)
    except ValueError as error:
        raise CliError(str(error)) from None
    from gpumon.tui.fleet_app import FleetApp

    FleetApp(client, interval=args.interval).run()
    return 0
