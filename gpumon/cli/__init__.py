"""Command line: the dashboard by default; snapshot, record, replay; run, attach and jobs for training jobs;
diagnose, experiment and demo for the advisor. One module per command, each registering its parser."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpumon import __version__, log
from gpumon.cli import (
    attach,
    demo,
    diagnose,
    experiment,
    exporter,
    fleet,
    hook_path,
    jobs,
    profile,
    record,
    replay,
    run,
    snapshot,
)
from gpumon.cli.base import CliError, Parser, guard_stdout, output_failed, run_handler
from gpumon.cli.dashboard import add_dashboard_arguments, run_dashboard

COMMANDS = (
    snapshot,
    record,
    replay,
    run,
    attach,
    jobs,
    hook_path,
    profile,
    diagnose,
    experiment,
    demo,
    exporter,
    fleet,
)

__all__ = ["CliError", "build_parser", "main"]


def build_parser() -> Parser:
    parser = Parser(
        prog="gpumon",
        description="Live dashboard of GPUs, CPU, GPU processes and disks: why is my GPU underused?",
    )
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
    add_dashboard_arguments(parser)
    parser.set_defaults(handler=run_dashboard)
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    guard_stdout()
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            if sys.stdout is not None:
                sys.stdout.flush()  # --help, --version: a pipe's reader gone is told here, not at exit
            raise
    except OSError as exc:
        return output_failed(exc)
    log.configure()
    return run_handler(args.handler, args)
