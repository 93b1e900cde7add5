"""Keeps the garbage collector's full collections off a long-running dashboard's start-up heap."""

from __future__ import annotations

import gc

from textual.app import App


def freeze_after_first_frame(app: App[None]) -> None:
    """Move every object alive once the first frame is drawn (imports, widgets, NVML bindings) out of the collector's
    reach: a full collection then walks only what came after, not ~75k start-up objects (tens of ms each time, most
    of the garbage collector's cost at 0.25 s, benchmarks/dashboard_threads.py). Headless apps (tests) are left
    alone, since freezing there would also keep the test process's garbage for good."""
    if not app.is_headless:
        app.call_after_refresh(gc.freeze)
