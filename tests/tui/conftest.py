"""Fixtures for the TUI tests: the recording the snapshot tests replay, and a fixed time zone."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

REPOSITORY = Path(__file__).resolve().parents[2]
RECORDING = REPOSITORY / "assets" / "recordings" / "h100-training.jsonl"
"""The recording the snapshot tests replay. Switch to REPOSITORY / "assets/recordings/h100-training.jsonl" once it
exists, then regenerate the screenshots: python -m pytest tests/tui --snapshot-update"""


@pytest.fixture(autouse=True, scope="session")
def utc_time_zone() -> Iterator[None]:
    """Snapshot times are shown in local time: pin it so screenshots match on every machine."""
    previous = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if previous is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = previous
    time.tzset()


@pytest.fixture(scope="session")
def recording() -> list[Snapshot]:
    return read_recording(RECORDING)


@pytest.fixture(scope="session")
def recording_name() -> str:
    return RECORDING.name
