"""`gpumon hook-path`: the directory to put on a job's PYTHONPATH so that `import gpumon.hook` works in any env."""

from __future__ import annotations

import argparse
import os

from gpumon.cli.base import Subparsers, subcommand

HOOK_IMPORT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hook_import")
"""Holds only a `gpumon` package that reads this installation's modules (gpumon/hook_import/gpumon/__init__.py)."""


def register(subparsers: Subparsers) -> None:
    subcommand(
        subparsers,
        "hook-path",
        help="print the directory to put on a job's PYTHONPATH for `import gpumon.hook`",
        handler=print_hook_path,
        description="Print the directory that lets a training script in any other environment (venv, conda, system "
        "Python 3.10+ with torch) `import gpumon.hook` from this installation, installing nothing there and "
        'putting none of gpumon\'s dependencies on its path: PYTHONPATH="$(gpumon hook-path)" python train.py',
    )


def print_hook_path(args: argparse.Namespace) -> int:
    print(HOOK_IMPORT_DIR)
    return 0
