"""`gpumon jobs`: this user's hooked jobs (root: everyone's), distributed ranks grouped."""

from __future__ import annotations

import argparse
import sys

from gpumon.cli.base import CliError, Subparsers, print_json_line, subcommand


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "jobs",
        help="list your hooked training jobs",
        handler=run_jobs,
        description="List this user's jobs that run the gpumon hook (distributed ranks grouped); "
        "stale sockets of dead jobs are removed.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (one object per job group)")
    parser.add_argument(
        "--socket-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also look in this socket directory (a job's GPUMON_SOCKET_DIR; repeat for several)",
    )


def run_jobs(args: argparse.Namespace) -> int:
    from gpumon import protocol
    from gpumon.jobs.discovery import scan
    from gpumon.printable import printable

    for directory in args.socket_dir:
        reason = protocol.unsafe_dir_reason(directory)
        if reason is not None:
            raise CliError(f"--socket-dir: {printable(reason)}")
    found = scan(directories=args.socket_dir)
    groups = found.groups
    if args.json:
        for group in groups:
            print_json_line(
                {
                    "group": list(group.key) if group.key else None,
                    "label": group.label,
                    "jobs": [dict(job.hello) for job in group.jobs],
                }
            )
        return 0
    if not groups:
        print("no hooked jobs (add `import gpumon.hook` to a training script, or run it with `gpumon run -- ...`)")
    for group in groups:
        print(printable(group.label))
        if group.distributed:
            for job in group.jobs:
                print(f"  rank {job.rank if job.rank is not None else '?'}  pid {job.pid}  {printable(job.cwd)}")
        else:
            print(f"  cwd {printable(group.primary.cwd)}")
    for pid, reason in found.unreachable:
        print(f"pid {pid}: not answering ({printable(str(reason))})", file=sys.stderr)
    for pid, reason in found.refused:
        print(f"pid {pid}: ignored a socket that may not speak for it ({printable(reason)})", file=sys.stderr)
    return 0
