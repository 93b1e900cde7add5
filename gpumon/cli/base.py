"""What every command shares: CliError, the argument types, JSON output and the exit-status helpers."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gpumon.sampling.source import MAX_INTERVAL, MIN_INTERVAL

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
PID_MAX = 1 << 22
"""The kernel's largest pid (PID_MAX_LIMIT on 64-bit Linux): anything above is not a process id."""
MAX_SECONDS = 366 * 24 * 3600.0
"""The longest duration or window a command accepts (a year): longer ones are typos, and overflow timers."""

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `gpumon attach: error: ... (see gpumon attach --help)`, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def run_handler(handler: Handler, args: argparse.Namespace) -> int:
    """Run a command's handler: a CliError is one line on stderr and exit 2, Ctrl+C exit 130."""
    try:
        return handler(args)
    except CliError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def pid_number(text: str) -> int:
    """A process id within the kernel's range."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id") from None
    if not 0 < value <= PID_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id (1..{PID_MAX})")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be zero or a positive number")
    return value


def positive_seconds(text: str) -> float:
    """A positive, finite number of seconds, at most MAX_SECONDS."""
    value = positive_float(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {MAX_SECONDS:g} seconds (a year)")
    return value


def interval_seconds(text: str) -> float:
    value = positive_float(text)
    if not MIN_INTERVAL <= value <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_INTERVAL:g}..{MAX_INTERVAL:g} seconds")
    return value


def add_interval_argument(parser: argparse.ArgumentParser, default: float | None = 1.0) -> None:
    """--interval; a default of None leaves it to the config file (the dashboard)."""
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=default,
        help=f"seconds between samples, {MIN_INTERVAL:g} to {MAX_INTERVAL:g} "
        + ("(default 1)" if default == 1.0 else "(default: the config file's, else 1)"),
    )


def add_command_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command to run")


def command_of(args: argparse.Namespace) -> list[str]:
    """The command after `--` (argparse keeps the `--` in a REMAINDER)."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    return command


def print_json_line(message: Any) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.stdout.flush()


Subparsers = Any
"""argparse's _SubParsersAction (private in typeshed's eyes): what each command module's register() adds to."""


def subcommand(
    subparsers: Subparsers, name: str, *, help: str, description: str, handler: Handler
) -> argparse.ArgumentParser:
    """Add the parser of one command, its handler set."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler)
    return parser
