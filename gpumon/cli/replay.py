"""`gpumon replay`: the dashboard on a recording, or an SVG screenshot of one moment of it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import CliError, Subparsers, non_negative_float, positive_float, subcommand
from gpumon.cli.dashboard import add_view_arguments, view_options
from gpumon.cli.textual_range import require_textual
from gpumon.printable import printable

if TYPE_CHECKING:
    from textual.pilot import Pilot

    from gpumon.sampling.replay import Replayer

SCREENSHOT_WAIT_S = 10.0
"""How long a screenshot waits for the dashboard to show the recording's last snapshot."""
EXIT_DAMAGED = 1
"""A recording that stopped being readable part-way (its good part replayed)."""
MAX_SIZE = (1000, 500)
"""The largest screenshot, in cells."""


def terminal_size(text: str) -> tuple[int, int]:
    """'160x50' -> (160, 50): columns and rows, at least 40x12, at most MAX_SIZE."""
    columns, _, rows = text.lower().partition("x")
    try:
        size = (int(columns), int(rows))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not COLUMNSxROWS, e.g. 160x50") from None
    if not (40 <= size[0] <= MAX_SIZE[0] and 12 <= size[1] <= MAX_SIZE[1]):
        raise argparse.ArgumentTypeError(f"{text!r} is outside 40x12..{MAX_SIZE[0]}x{MAX_SIZE[1]}")
    return size


def register(subparsers: Subparsers) -> None:
    parser = subcommand(
        subparsers,
        "replay",
        help="open the dashboard on a recording",
        description="Open the dashboard on a recording.",
        handler=run_replay,
    )
    parser.add_argument("file", type=Path, help="a file written by `gpumon record` (plain or gzip-compressed)")
    parser.add_argument("--speed", type=positive_float, default=1.0, help="playback speed (+/- change it live)")
    parser.add_argument(
        "--screenshot",
        type=Path,
        metavar="OUT.svg",
        help="no terminal: write the dashboard as it shows the recording's last snapshot, or the one --at names (its "
        "history behind the graphs), to this SVG file, and exit",
    )
    parser.add_argument(
        "--at",
        type=non_negative_float,
        metavar="SECONDS",
        help="start this many seconds into the recording, its history up to there behind the graphs (with "
        "--screenshot: the screen at that moment)",
    )
    parser.add_argument(
        "--size", type=terminal_size, default=(160, 50), metavar="COLSxROWS", help="the screenshot's size (160x50)"
    )
    add_view_arguments(parser)


def check_not_the_recording(recording: Path, screenshot: Path) -> None:
    """CliError when the screenshot would be written over the recording itself (the same file by any name)."""
    try:
        same = os.path.samefile(recording, screenshot)
    except OSError:  # one of them does not exist (yet)
        same = os.path.realpath(recording) == os.path.realpath(screenshot)
    if same:
        raise CliError(f"--screenshot {printable(str(screenshot))} is the recording itself: name another file")


def damage(replayer: Replayer) -> str | None:
    """One line when the replay stopped at a bad line (a gzip stream corrupt mid-way, a line cut short); None when
    every snapshot read was good."""
    if replayer.error is None:
        return None
    return printable(
        f"{replayer.name}: recording truncated/corrupt after {replayer.snapshots_read} samples ({replayer.error})"
    )


def run_replay(args: argparse.Namespace) -> int:
    require_textual()
    from gpumon.jobs.recorded import RecordedJobs
    from gpumon.sampling.recording import RecordingError, count_snapshots, iter_samples
    from gpumon.sampling.replay import Replayer
    from gpumon.tui.replay_app import ReplayApp

    if args.screenshot is not None:
        check_not_the_recording(args.file, args.screenshot)
    recorded = RecordedJobs()
    try:
        replayer = Replayer(iter_samples(args.file), speed=args.speed, name=args.file.name)
        replayer.total = count_snapshots(args.file)
    except (RecordingError, ValueError) as error:
        raise CliError(str(error)) from None
    replayer.on_jobs.append(recorded.add)
    try:
        if args.at is not None or args.screenshot is not None:
            replayer.skip_to(args.at)  # the history behind the graphs; a screenshot without --at: the last snapshot
    except ValueError as error:
        if (damaged := damage(replayer)) is None:
            raise CliError(str(error)) from None
        print(f"gpumon: {damaged}: --at {args.at:g} is past it", file=sys.stderr)
        return EXIT_DAMAGED
    if args.screenshot is not None:
        if (damaged := damage(replayer)) is not None:
            print(f"gpumon: {damaged}: no screenshot written", file=sys.stderr)
            return EXIT_DAMAGED
        replayer.end_after_next()  # the app is shown the moment's snapshot when it starts
    app = ReplayApp(replayer, recorded, options=view_options(args), clock=replayer.latest_timestamp)
    if args.screenshot is None:
        app.run()
        if (damaged := damage(replayer)) is not None:
            print(f"gpumon: {damaged}", file=sys.stderr)
            return app.return_code or EXIT_DAMAGED
        return app.return_code or 0
    saved: list[str] = []

    async def take(pilot: Pilot[object]) -> None:
        for _ in range(int(SCREENSHOT_WAIT_S / 0.05)):
            if app.snapshot is not None:
                break
            await asyncio.sleep(0.05)
        await pilot.pause()
        saved.append(app.export_screenshot(title=f"gpumon replay {args.file.name}"))
        app.exit()

    app.run(headless=True, size=args.size, auto_pilot=take)
    if not saved or app.snapshot is None:
        raise CliError(f"the dashboard did not show {args.file.name} within {SCREENSHOT_WAIT_S:g} s")
    try:
        args.screenshot.write_text(saved[0], encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {args.screenshot}: {error.strerror or error}") from None
    print(f"gpumon: wrote {args.screenshot} ({args.size[0]}x{args.size[1]}, {replayer.position} snapshots)")
    return 0
