"""What every command shares: CliError, the argument types, JSON output and the exit-status helpers."""

from __future__ import annotations

import argparse
import errno
import io
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from gpumon.sampling.interval import MAX_INTERVAL_S, MIN_INTERVAL_S, interval_in_range

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_OUTPUT_FAILED = 1
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command whose reader went away (`gpumon ... | head`)."""
PID_MAX = 1 << 22
"""The kernel's largest pid (PID_MAX_LIMIT on 64-bit Linux): anything above is not a process id."""
MAX_SECONDS = 366 * 24 * 3600.0
"""The longest duration or window a command accepts (a year): longer ones are typos, and overflow timers."""

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code 2 (or `status`: 127 for a command not found)."""

    def __init__(self, message: str, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `gpumon attach: error: ... (see gpumon attach --help)`, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Stdout(io.RawIOBase):
    """File descriptor 1 for sys.stdout, remembering the error a write to it raised (so a failing stdout is told
    apart from a failing socket); once that is said, the rest of the output is dropped, so exiting stays quiet."""

    def __init__(self, closed: bool) -> None:
        super().__init__()
        self.was_closed = closed
        self.failure: OSError | None = None
        self.dropping = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 1

    def isatty(self) -> bool:
        return not self.was_closed and os.isatty(1)

    def write(self, data: Any) -> int:
        if self.dropping:
            return len(data)
        if self.was_closed:
            self.failure = OSError(errno.EBADF, "standard output is closed")
            raise self.failure
        try:
            return os.write(1, data)
        except BlockingIOError:
            raise
        except OSError as exc:
            self.failure = exc
            raise


_stdout: _Stdout | None = None


def guard_stdout() -> None:
    """Put sys.stdout on a writer whose failures output_failed recognizes (main calls it first).

    Left alone where something else already replaced sys.stdout (a test capturing it). A closed stdout (`>&-`) gets
    /dev/null on descriptor 1, so no socket or file the command opens lands there, and a writer that fails.
    """
    global _stdout
    current = sys.stdout
    if _stdout is not None or (current is not None and current is not sys.__stdout__):
        return
    try:
        os.fstat(1)
        closed = False
    except OSError:
        closed = True
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            if fd != 1:
                os.dup2(fd, 1)
                os.close(fd)
        except OSError:
            pass
    raw = _Stdout(closed)
    tty = raw.isatty()
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=current.encoding if current is not None else "utf-8",
        errors=current.errors if current is not None else "strict",
        line_buffering=tty,
    )
    _stdout = raw


def output_failed(exc: OSError) -> int:
    """The exit status for `exc` when writing stdout raised it (a broken pipe quietly, else one line); re-raises
    any other OSError."""
    raw = _stdout
    if raw is None or raw.failure is None:
        raise exc
    raw.dropping = True
    failure = raw.failure
    if isinstance(failure, BrokenPipeError):
        return EXIT_BROKEN_PIPE
    try:
        print(f"gpumon: error: cannot write output: {failure.strerror or failure}", file=sys.stderr)
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_OUTPUT_FAILED


def run_handler(handler: Handler, args: argparse.Namespace) -> int:
    """Run a command's handler: a CliError is one line on stderr and exit 2, Ctrl+C exit 130; stdout that cannot
    be written (a reader that left, a full disk, closed) exits 141 quietly or 1 with one line."""
    try:
        code = handler(args)
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except CliError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return error.status
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OSError as exc:
        return output_failed(exc)


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


def non_negative_seconds(text: str) -> float:
    """Zero or a positive, finite number of seconds, at most MAX_SECONDS (e.g. no warm-up left out)."""
    value = non_negative_float(text)
    if value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {MAX_SECONDS:g} seconds (a year)")
    return value


def interval_seconds(text: str) -> float:
    value = positive_float(text)
    if not interval_in_range(value):
        raise argparse.ArgumentTypeError(f"{text!r} is outside {MIN_INTERVAL_S:g}..{MAX_INTERVAL_S:g} seconds")
    return value


def add_interval_argument(parser: argparse.ArgumentParser, default: float | None = 1.0) -> None:
    """--interval; a default of None leaves it to the config file (the dashboard)."""
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=default,
        help=f"seconds between samples, {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g} "
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
