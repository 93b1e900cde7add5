"""`gpumon fleet`: the fleet view from Prometheus (every host and GPU with its state, jobs grouped across hosts)."""

from __future__ import annotations

import argparse

from gpumon.cli.base import CliError, Subparsers, interval_seconds, positive_float, subcommand
from gpumon.cli.textual_range import require_textual

DEFAULT_INTERVAL = 5.0
DESCRIPTION = (
    "Read what gpumon exporters sent to Prometheus and show it: every host Prometheus knows, DOWN when its scrape "
    "fails or its sample is stale, NVML FAILED with the error; one row per GPU (utilization, SM activity, memory, "
    "each with its recent graph on a 0-100% scale, and its health: XID, uncorrectable ECC, remaps, throttling, a "
    "slow PCIe link, off the bus); and hooked jobs grouped across hosts by torchrun run id with per-rank step time "
    "and data wait, the straggler rank and the job's finding. Keys: / filter, s sort, Enter a host's processes."
)
FILTER_HELP = (
    "show only rows matching TERM (repeatable, all must match): host=~REGEX, host=NAME, "
    "state=down|nvml_failed|off_bus|alert|warn|no_gpus|ok (state!=ok: every problem; another state is refused), "
    "util<20, mem>=90, model=~.*H100.*, any target label (rack=r7); =~ and !~ match the whole value, as in PromQL; "
    "a bare word matches part of the host name"
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
    auth = parser.add_argument_group("reaching Prometheus (secrets are read from files, never printed)")
    auth.add_argument("--bearer-token-file", metavar="FILE", help="send 'Authorization: Bearer' with FILE's token")
    auth.add_argument("--basic-auth-file", metavar="FILE", help="HTTP basic auth from FILE's one line user:password")
    auth.add_argument("--ca-file", metavar="FILE", help="trust only the CAs in this PEM file (https:// URLs)")
    auth.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="an extra header on every request, e.g. 'X-Scope-OrgID: team' (repeatable)",
    )
    view = parser.add_argument_group("what to show")
    view.add_argument("--filter", action="append", default=[], metavar="TERM", help=FILTER_HELP)
    view.add_argument(
        "--sort",
        default="host",
        help="host (default), state (the worst first), util or mem (the least used first); -KEY reverses",
    )
    view.add_argument(
        "--stale-after",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="a host whose sample was older than this when scraped is DOWN (default 60)",
    )


def run_fleet(args: argparse.Namespace) -> int:
    from gpumon.fleet import PromClient, check_url
    from gpumon.fleet.auth import read_auth
    from gpumon.fleet.hosts import STALE_AFTER
    from gpumon.fleet.view import check_sort, parse_filter

    try:
        parse_filter(args.filter)
        sort = check_sort(args.sort)
        base = check_url(args.prometheus)
        auth = read_auth(base, args.bearer_token_file, args.basic_auth_file, args.ca_file, args.header)
    except ValueError as error:  # FilterError, AuthError and a bad URL: one line each
        raise CliError(str(error)) from None
    require_textual()
    from gpumon.tui.fleet_app import FleetApp

    stale_after = STALE_AFTER if args.stale_after is None else args.stale_after
    client = PromClient(base, auth=auth)
    FleetApp(
        client, interval=args.interval, stale_after=stale_after, sort=sort, filter_text=" ".join(args.filter)
    ).run()
    return 0
