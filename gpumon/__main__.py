"""Entry point for `python -m gpumon`."""

from gpumon.cli import main

raise SystemExit(main())
