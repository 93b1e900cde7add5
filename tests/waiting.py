"""Waiting on a condition with a deadline (never a fixed sleep followed by an assert): the tests' one poller."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> None:
    """Return once `condition()` is true; AssertionError naming `what` when it is not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    if not condition():
        raise AssertionError(f"{what}: not within {timeout:g} s")
