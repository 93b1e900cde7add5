"""What the advisor's commands (diagnose, experiment, demo) share: progress lines, signals, the report's output."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import CliError, print_json
from gpumon.printable import printable

if TYPE_CHECKING:  # the advisor is imported only by the commands that run it
    from gpumon.advisor.results import GuidedReport


class StderrProgress:
    """Progress lines on stderr, each message once."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.last = ""

    def __call__(self, message: str, _fraction: float) -> None:
        if self.quiet or message == self.last:
            return
        self.last = message
        print(f"gpumon: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end a headless run as Ctrl+C does (KeyboardInterrupt), so its trial is stopped."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def signals_as_cancel(cancel: threading.Event) -> Iterator[None]:
    """Ctrl+C, SIGTERM and SIGHUP set `cancel` (the run winds down: rolls its changes back and reports); a second
    one ends it as KeyboardInterrupt."""

    def wind_down(_signum: int, _frame: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        print("gpumon: stopping: putting the job's knobs back (again to quit now)", file=sys.stderr, flush=True)
        cancel.set()

    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, wind_down) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def check_markdown_path(path: Path | None) -> None:
    """CliError now, before anything runs, when --markdown's FILE could not be written at the end (a missing or
    unwritable directory, a directory or other non-file in its place): the results are not lost after the run."""
    if path is None:
        return
    parent = path.parent
    shown = printable(str(path))
    try:
        if path.exists() or path.is_symlink():
            if not path.is_file():
                raise CliError(f"--markdown: cannot write {shown}: not a regular file")
            if not os.access(path, os.W_OK):
                raise CliError(f"--markdown: cannot write {shown}: Permission denied")
            return
        if not parent.is_dir():
            raise CliError(f"--markdown: cannot write {shown}: no directory {printable(str(parent))}")
    except OSError as error:
        raise CliError(f"--markdown: cannot write {shown}: {error.strerror or error}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"--markdown: cannot write {shown}: Permission denied")


def write_markdown(path: Path | None, report: GuidedReport, title: str) -> None:
    if path is None:
        return
    from gpumon.advisor.report import report_markdown

    try:
        path.write_text(report_markdown(report, title=title), encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot write {path}: {error.strerror or error}") from None
    print(f"gpumon: wrote {path}", file=sys.stderr)


def print_report(report: GuidedReport, as_json: bool) -> None:
    from gpumon.advisor.report import report_text

    if as_json:
        print_json(report.to_dict())
    else:
        print(report_text(report))
