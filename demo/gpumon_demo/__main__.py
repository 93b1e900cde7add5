"""`python -m gpumon_demo`: runs the slow demo trainer."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
