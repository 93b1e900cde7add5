"""GPUMON_FIRST_FRAME_REPORT=FILE: write the process's CPU seconds once the first snapshot is drawn, then exit."""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from pathlib import Path

from textual.app import App

FIRST_FRAME_ENV = "GPUMON_FIRST_FRAME_REPORT"
"""Where benchmarks/startup_cpu.py asks for the CPU time from exec to the first frame with data on it."""


def report_after_first_frame(app: App[None], environ: Mapping[str, str] = os.environ) -> None:
    """With FIRST_FRAME_ENV set: once the frame now being prepared is painted, write the CPU seconds this process
    has used since exec (user + system) to that file and exit the app. Without it: nothing."""
    path = environ.get(FIRST_FRAME_ENV)
    if not path:
        return

    def report() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        Path(path).write_text(f"{usage.ru_utime + usage.ru_stime:.4f}\n", encoding="utf-8")
        app.exit()

    app.call_after_refresh(report)
