"""Suite-wide: pytest itself is never left a hooked job; a fixed time zone for screenshots."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    """Importing any part of gpumon.hook (several test modules do) installs the hook in pytest; take it off again,
    so dashboards and discovery started by later tests never find the test runner as a training job."""
    lifecycle = sys.modules.get("gpumon.hook.lifecycle")
    if lifecycle is not None:
        lifecycle.uninstall()


@pytest.fixture(scope="session")
def utc_time_zone() -> Iterator[None]:
    """Screens show times in local time: pin it so screenshots match on every machine."""
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if previous is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = previous
    time.tzset()
