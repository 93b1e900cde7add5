"""Fixtures for the TUI tests: the recordings the snapshot tests replay, and a fixed time zone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

REPOSITORY = Path(__file__).resolve().parents[2]
RECORDING = REPOSITORY / "assets" / "recordings" / "h100-training.jsonl"
"""The recording the snapshot tests replay. Switch to REPOSITORY / "assets/recordings/h100-training.jsonl" once it
exists, then regenerate the screenshots: python -m pytest tests/tui --snapshot-update"""
TWO_GPU_RECORDING = REPOSITORY / "assets" / "recordings" / "h100x2-tests.jsonl"
"""Two H100s joined by NVLink; its first 57 s end with two DDP ranks running, one per GPU."""
TWO_GPU_SHOWN = 57


@pytest.fixture(autouse=True, scope="session")
def snapshots_in_utc(utc_time_zone: None) -> None:
    """Every TUI test in UTC (tests/conftest.py's utc_time_zone)."""


@pytest.fixture(scope="session")
def recording() -> list[Snapshot]:
    return read_recording(RECORDING)


@pytest.fixture(scope="session")
def recording_name() -> str:
    return RECORDING.name


@pytest.fixture(scope="session")
def two_gpu_recording() -> list[Snapshot]:
    return read_recording(TWO_GPU_RECORDING)[:TWO_GPU_SHOWN]


@pytest.fixture(scope="session")
def two_gpu_recording_name() -> str:
    return TWO_GPU_RECORDING.name
