"""Fixtures for the TUI tests: the recording the snapshot tests replay, and a fixed time zone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

REPOSITORY = Path(__file__).resolve().parents[2]
RECORDING = REPOSITORY / "assets" / "recordings" / "h100-training.jsonl"
"""The recording the snapshot tests replay. Switch to REPOSITORY / "assets/recordings/h100-training.jsonl" once it
exists, then regenerate the screenshots: python -m pytest tests/tui --snapshot-update"""


@pytest.fixture(autouse=True, scope="session")
def snapshots_in_utc(utc_time_zone: None) -> None:
    """Every TUI test in UTC (tests/conftest.py's utc_time_zone)."""


@pytest.fixture(scope="session")
def recording() -> list[Snapshot]:
    return read_recording(RECORDING)


@pytest.fixture(scope="session")
def recording_name() -> str:
    return RECORDING.name
