"""`gpumon snapshot`: print one complete sample and exit."""

from __future__ import annotations

import argparse
import json
import sys

from gpumon.cli.base import Subparsers, positive_seconds, subcommand


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "snapshot",
        help="print one complete sample and exit",
        description="Print one complete sample and exit.",
        handler=run_snapshot,
    )
    parser.add_argument("--json", action="store_true", help="print JSON (schema: docs/schema.md)")
    parser.add_argument(
        "--window", type=positive_seconds, default=0.5, help="seconds between the two readings rates are taken over"
    )


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
