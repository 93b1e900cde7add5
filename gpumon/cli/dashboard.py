"""`gpumon` with no command: the dashboard, offering this user's hooked jobs in a picker first; the view flags it
shares with `gpumon replay` (--read-only, --user, --only, --only-visible) and the config file."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from gpumon.cli.base import add_interval_argument
from gpumon.cli.textual_range import require_textual
from gpumon.config import config_path, load_settings
from gpumon.sampling.gpu_choice import add_gpu_choice_arguments, chosen_gpus
from gpumon.tui.glyphs import wants_ascii
from gpumon.tui.view_options import ViewOptions


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags the live dashboard and `gpumon replay` share."""
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="no process control: I, T and K send no signals (also: read_only = true in the config)",
    )
    parser.add_argument("--user", metavar="NAME", help="show only this user's processes")
    add_gpu_choice_arguments(parser, "show")
    parser.add_argument(
        "--ascii",
        action="store_true",
        help="draw graphs, sparklines and bars in ASCII (the default where the locale is not UTF-8 or TERM=linux)",
    )


def add_dashboard_arguments(parser: argparse.ArgumentParser) -> None:
    add_interval_argument(parser, default=None)
    add_view_arguments(parser)


def view_options(args: argparse.Namespace) -> ViewOptions:
    """The config file's settings (its problems printed, one line each) with the command line's flags on top."""
    path = config_path()
    settings, warnings = load_settings(path)
    for warning in warnings:
        print(f"gpumon: {warning}", file=sys.stderr)
    if args.read_only:
        settings = replace(settings, read_only=True)
    return ViewOptions(
        settings=settings,
        user=args.user,
        gpus=chosen_gpus(args, os.environ),
        config_file=path,
        warnings=tuple(warnings),
        ascii=args.ascii or wants_ascii(os.environ),
    )


def run_dashboard(args: argparse.Namespace) -> int:
    """The dashboard; when this user's hooked jobs run, it first offers them in a picker (escape: plain)."""
    require_textual()
    from gpumon.jobs.discovery import scan
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    options = view_options(args)
    interval = args.interval if args.interval is not None else options.settings.interval
    app = GpumonApp(Sampler(interval=interval), jobs=scan().groups, options=options)
    app.run()
    return app.return_code or 0
