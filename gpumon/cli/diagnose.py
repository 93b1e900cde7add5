"""`gpumon diagnose`: watch a job (run CMD hooked, or --pid) and name what holds it back."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from gpumon.advisor.categories import CATEGORIES
from gpumon.cli.attach import add_native_argument
from gpumon.cli.base import (
    CliError,
    Subparsers,
    add_command_argument,
    command_of,
    non_negative_seconds,
    pid_number,
    positive_seconds,
    print_json,
    subcommand,
)
from gpumon.cli.profile import steps_number
from gpumon.cli.reporting import StderrProgress, signals_as_interrupt

if TYPE_CHECKING:
    from gpumon.jobs.source import JobSource


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "diagnose",
        help="name what holds a training job back",
        handler=run_diagnose,
        description=f"Watch a training job for a while and name its bottleneck ({', '.join(CATEGORIES[:-1])} or "
        f"{CATEGORIES[-1]}) with the evidence. "
        "Either run CMD with the hook (and stop it after --duration), or watch a running job (--pid).",
    )
    parser.add_argument("--pid", type=pid_number, default=None, help="a running job (its hook, else py-spy)")
    parser.add_argument(
        "--duration",
        type=positive_seconds,
        default=20.0,
        help="seconds to watch (with CMD: after its first step, warm-up included; default 20)",
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_seconds,
        default=5.0,
        help="with CMD: seconds after the first step left out (default 5)",
    )
    parser.add_argument(
        "--profile",
        type=steps_number,
        default=0,
        metavar="N",
        help="with --pid on a hooked job: also capture N steps with torch.profiler (trace, kernel summary, "
        "comm_bound from NCCL time not hidden behind compute)",
    )
    parser.add_argument("--json", action="store_true", help="print the finding and its signals as JSON")
    # Hidden: with --pid, sample the job with py-spy even where it has the hook, so a benchmark can score both ways
    # of seeing one job (benchmarks/scenario_corpus.py; benchmarks/scenarios/README.md).
    parser.add_argument("--pyspy", action="store_true", help=argparse.SUPPRESS)
    add_native_argument(parser)
    add_command_argument(parser)


def target_command(args: argparse.Namespace, name: str) -> list[str]:
    """The command to run, or [] with --pid; exactly one of the two (CliError otherwise)."""
    command = command_of(args)
    if args.pid is None and not command:
        raise CliError(f"gpumon {name} needs a command (gpumon {name} -- python train.py) or --pid PID")
    if args.pid is not None and command:
        raise CliError(f"gpumon {name}: give either --pid or a command, not both")
    return command


def pyspy_only(pid: int, *, native: bool = False) -> JobSource:
    """A py-spy sampler of `pid`, hooked or not (`--pyspy`)."""
    from gpumon.jobs.pyspy.sampler import PySpySampler

    sampler = PySpySampler(pid, native=native)
    sampler.probe()
    return sampler


def say(message: str) -> None:
    """One line on stderr (what the diagnosis does to the job beyond watching it)."""
    print(message, file=sys.stderr, flush=True)


def run_diagnose(args: argparse.Namespace) -> int:
    from gpumon.advisor.report import finding_text, step_model_lines
    from gpumon.advisor.session import AdvisorError, diagnose_command, diagnose_pid
    from gpumon.jobs.launch import LaunchedJob
    from gpumon.jobs.session import open_job

    command = target_command(args, "diagnose")
    if args.native and args.pid is None:
        raise CliError("gpumon diagnose: --native goes with --pid (a job without the hook, sampled with py-spy)")
    if args.pyspy and args.pid is None:
        raise CliError("gpumon diagnose: --pyspy goes with --pid")
    if args.profile and args.pid is None:
        raise CliError("gpumon diagnose: --profile goes with --pid (a running hooked job)")
    progress = StderrProgress()
    try:
        with signals_as_interrupt():
            if args.pid is not None:
                result = diagnose_pid(
                    args.pid,
                    duration=args.duration,
                    progress=progress,
                    native=args.native,
                    profile_steps=args.profile,
                    notice=say,
                    opener=pyspy_only if args.pyspy else open_job,
                )
            else:
                result = diagnose_command(
                    command,
                    launcher=LaunchedJob,
                    duration=args.duration,
                    warmup_s=min(args.warmup, args.duration / 2),
                    progress=progress,
                    notice=say,
                )
    except AdvisorError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json(result.to_dict())
    else:
        print(finding_text(result.finding))
        for line in step_model_lines(result.signals):
            print(line)
        if result.capture is not None:
            from gpumon.advisor.trace_summary import summary_lines

            print("\nProfiler capture:")
            print("\n".join(summary_lines(result.capture.summary)))
    if result.capture_error is not None:
        print(f"gpumon: {result.capture_error}", file=sys.stderr)
    if result.records_note is not None:  # the JSON has it as steps_closed_in_window / step_records_in_window
        print(f"gpumon: pid {args.pid}: {result.records_note}", file=sys.stderr)
    if result.exit_note is not None:  # the JSON has it as job_exited_after_s
        if args.json:
            print(f"gpumon: pid {args.pid}: {result.exit_note}", file=sys.stderr)
        else:
            print(result.exit_note)
        return 1
    return 0
