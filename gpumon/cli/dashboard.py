"""`gpumon` with no command: the dashboard, offering this user's hooked jobs in a picker first."""

from __future__ import annotations

import argparse


def run_dashboard(args: argparse.Namespace) -> int:
    """The dashboard; when this user's hooked jobs run, it first offers them in a picker (escape: plain)."""
    from gpumon.jobs.discovery import scan
    from gpumon.sampling.sampler import Sampler
    from gpumon.tui.app import GpumonApp

    app = GpumonApp(Sampler(interval=args.interval), jobs=scan().groups)
    app.run()
    return app.return_code or 0
