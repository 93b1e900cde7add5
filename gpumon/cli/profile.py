"""`gpumon profile PID --steps N`: torch.profiler inside a hooked job for N steps; the trace and its summary."""

from __future__ import annotations

import argparse
import sys

from gpumon.cli.base import CliError, Subparsers, pid_number, positive_seconds, print_json, subcommand


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "profile",
        help="capture a running hooked job's next steps with torch.profiler",
        handler=run_profile,
        description="Ask a job's gpumon hook to run torch.profiler for the next N steps, write the trace "
        "(.json.gz: open it in https://ui.perfetto.dev or chrome://tracing) and summarize it: top kernels by GPU "
        "time, GPU idle gaps, host<->device copies and their pageable share, NCCL time and its overlap with "
        "compute. The job pays for the profiler only during those steps.",
    )
    parser.add_argument("pid", type=pid_number, help="the job's process id (one rank of a DDP job)")
    parser.add_argument("--steps", type=steps_number, default=5, help="steps to capture, 1..100 (default 5)")
    parser.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="directory for the trace (default $XDG_CACHE_HOME/gpumon/traces, i.e. ~/.cache/gpumon/traces)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=120.0,
        help="seconds to wait for the steps and the trace (default 120)",
    )
    parser.add_argument("--json", action="store_true", help="print the hook's result and the summary as JSON")


def steps_number(text: str) -> int:
    from gpumon import protocol

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of steps") from None
    if not 1 <= value <= protocol.PROFILE_MAX_STEPS:
        raise argparse.ArgumentTypeError(f"{text!r} is outside 1..{protocol.PROFILE_MAX_STEPS} steps")
    return value


def run_profile(args: argparse.Namespace) -> int:
    from gpumon.advisor.capture import CaptureError, capture
    from gpumon.advisor.trace_summary import summary_lines
    from gpumon.jobs.client import JobClient
    from gpumon.jobs.discovery import AttachError
    from gpumon.jobs.session import unseen_reason
    from gpumon.printable import printable

    reason = unseen_reason(args.pid)
    if reason is not None:
        raise CliError(reason)
    client = JobClient(args.pid)
    try:
        client.connect()
    except AttachError as error:
        hint = "gpumon profile needs the gpumon hook in the job: gpumon run, or import gpumon.hook"
        raise CliError(f"{error} ({hint})") from None
    client.start()
    try:

        def started(reply: dict[str, object]) -> None:
            where = printable(str(reply.get("path", "")))
            print(f"gpumon: profiling {args.steps} steps of pid {args.pid} into {where}", file=sys.stderr, flush=True)

        try:
            result = capture(client, args.steps, directory=args.out, timeout=args.timeout, on_started=started)
        except CaptureError as error:
            raise CliError(str(error)) from None
    finally:
        client.stop()
    if args.json:
        print_json(result.to_dict())
    else:
        print("\n".join(summary_lines(result.summary)))
    return 0
