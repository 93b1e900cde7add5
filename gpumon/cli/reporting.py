"""What the advisor's commands (diagnose, experiment, demo) share: progress lines, signals, the report's output."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gpumon.cli.base import CliError, print_json

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
