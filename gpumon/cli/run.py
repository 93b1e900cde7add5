"""`gpumon run -- CMD`: run a training command with the hook injected and open the dashboard on it."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import (
    EXIT_USAGE,
    CliError,
    Subparsers,
    add_command_argument,
    add_interval_argument,
    command_of,
    subcommand,
)
from gpumon.cli.textual_range import require_textual

if TYPE_CHECKING:  # the jobs layer is imported where the command runs, not on every gpumon start
    from gpumon.jobs.launch import LaunchedJob


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "run",
        help="run a training command with the gpumon hook and watch it",
        handler=run_launch,
        description="Run CMD with the gpumon hook injected (no change to the script) and open the dashboard on it "
        "as soon as it starts training. The job's output goes to a log file while the dashboard is open; "
        "quitting the dashboard stops the job (SIGINT). With --no-tui, only inject and wait for CMD.",
    )
    parser.add_argument(
        "--no-tui", action="store_true", help="no dashboard: run CMD hooked, pass its exit code through"
    )
    parser.add_argument(
        "--nvtx",
        action="store_true",
        help="the hook marks step, data wait, forward, backward and optimizer as NVTX ranges, so an nsys profile "
        "of this command shows them (e.g. nsys profile -t cuda,nvtx gpumon run --nvtx --no-tui -- python train.py); "
        "every module call then runs the hook's forward hooks too (a microsecond or two each): for profiling runs",
    )
    add_interval_argument(parser)
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="where the job's output goes under the dashboard (default: a new /tmp/gpumon-run-*.log)",
    )
    add_command_argument(parser)


def launched(command: list[str], log: Path | None = None, nvtx: bool = False) -> LaunchedJob:
    """The job, started (CliError when it cannot be); says where its socket goes when the usual place was unsafe."""
    from gpumon.jobs.launch import LaunchedJob, LaunchError

    if not command:
        raise CliError("gpumon run needs a command, e.g. gpumon run -- python train.py")
    try:
        job = LaunchedJob(command, log=log, nvtx=nvtx).start()
    except LaunchError as error:
        raise CliError(str(error), error.status or EXIT_USAGE) from None
    if job.refused_dir is not None:
        print(
            f"gpumon: refused the socket directory: {job.refused_dir}; the job serves in {job.socket_dir} instead",
            file=sys.stderr,
        )
    return job


def run_launch(args: argparse.Namespace) -> int:
    from gpumon.jobs.launch import exit_status, new_log_path

    command = command_of(args)
    if not command:  # before the log file is made: no empty /tmp/gpumon-run-*.log left behind
        raise CliError("gpumon run needs a command, e.g. gpumon run -- python train.py")
    if args.no_tui:
        if args.log is not None:
            raise CliError(
                "--log goes with the dashboard: with --no-tui the job's output stays on this terminal "
                "(redirect it: > FILE 2>&1)"
            )
        with launched(command, nvtx=args.nvtx) as job:
            return exit_status(job.wait_forwarding_signals())

    require_textual()
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.advisor_app import AdvisorApp

    log_path: Path = args.log if args.log is not None else new_log_path("gpumon-run-")
    try:
        job = launched(command, log_path, args.nvtx)
    except CliError:
        if args.log is None:
            log_path.unlink(missing_ok=True)  # no job, no output: no empty /tmp/gpumon-run-*.log left behind
        raise
    with job:
        print(f"gpumon: started pid {job.pid}; its output goes to {log_path}", file=sys.stderr)
        followed = job.follow()
        sampler = Sampler(interval=args.interval)
        sampler.track_pids([job.pid])
        app = AdvisorApp(sampler, job=followed, show_advisor=False)
        # A closed terminal or a kill of gpumon must not leave the job running: quit, then stop it below.
        previous = {signum: signal.signal(signum, lambda *_: app.exit()) for signum in (signal.SIGTERM, signal.SIGHUP)}
        try:
            app.run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            returncode = job.stop(exiting=followed.ended)
    status = exit_status(returncode if returncode is not None else 0)
    print(f"gpumon: the job exited with status {status}; its output: {log_path}", file=sys.stderr)
    return status
