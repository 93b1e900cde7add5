"""`gpumon replay`: the dashboard on a recording."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpumon.cli.base import CliError, Subparsers, positive_float, subcommand
from gpumon.cli.dashboard import add_view_arguments, view_options


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "replay",
        help="open the dashboard on a recording",
        description="Open the dashboard on a recording.",
        handler=run_replay,
    )
    parser.add_argument("file", type=Path, help="a file written by `gpumon record`")
    parser.add_argument("--speed", type=positive_float, default=1.0, help="playback speed (+/- change it live)")
    add_view_arguments(parser)


def run_replay(args: argparse.Namespace) -> int:
    from gpumon.sampling.recording import RecordingError, read_recording
    from gpumon.sampling.replay import Replayer
    from gpumon.tui.app import GpumonApp

    try:
        snapshots = read_recording(args.file)
    except RecordingError as error:
        raise CliError(str(error)) from None
    app = GpumonApp(Replayer(snapshots, speed=args.speed, name=args.file.name), options=view_options(args))
    app.run()
    return app.return_code or 0
