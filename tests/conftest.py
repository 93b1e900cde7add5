"""Suite-wide: pytest itself is never left a hooked job."""

from __future__ import annotations

import sys

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    """Importing any part of gpumon.hook (several test modules do) installs the hook in pytest; take it off again,
    so dashboards and discovery started by later tests never find the test runner as a training job."""
    lifecycle = sys.modules.get("gpumon.hook.lifecycle")
    if lifecycle is not None:
        lifecycle.uninstall()
