"""The sampling interval's one range: its check, its clamp, and the README stating what the module defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpumon.sampling.interval import (
    MAX_INTERVAL_S,
    MAX_RECORD_INTERVAL_S,
    MIN_INTERVAL_S,
    clamp_interval,
    interval_in_range,
)
from gpumon.sampling.source import INTERVAL_STEPS

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("seconds", "maximum", "inside"),
    [
        (MIN_INTERVAL_S, MAX_INTERVAL_S, True),
        (MAX_INTERVAL_S, MAX_INTERVAL_S, True),
        (0.05, MAX_INTERVAL_S, False),
        (30.0, MAX_INTERVAL_S, False),
        (30.0, MAX_RECORD_INTERVAL_S, True),
        (61.0, MAX_RECORD_INTERVAL_S, False),
    ],
)
def test_interval_in_range(seconds: float, maximum: float, inside: bool) -> None:
    assert interval_in_range(seconds, maximum) is inside


def test_clamp_interval_keeps_the_range() -> None:
    assert clamp_interval(0.01) == MIN_INTERVAL_S
    assert clamp_interval(30.0) == MAX_INTERVAL_S
    assert clamp_interval(30.0, MAX_RECORD_INTERVAL_S) == 30.0


def test_the_keys_step_within_the_dashboard_range() -> None:
    assert (INTERVAL_STEPS[0], INTERVAL_STEPS[-1]) == (MIN_INTERVAL_S, MAX_INTERVAL_S)


def test_the_readme_states_the_module_ranges() -> None:
    dashboard = f"{MIN_INTERVAL_S:g}-{MAX_INTERVAL_S:g}"
    record = f"{MIN_INTERVAL_S:g}-{MAX_RECORD_INTERVAL_S:g}"
    config_line = next(line for line in README.splitlines() if re.match(r"interval = ", line))
    record_line = next(line for line in README.splitlines() if line.startswith("gpumon record run.jsonl --duration"))
    assert f"# seconds, {dashboard} " in config_line and f"gpumon record: {record})" in config_line
    assert f"({record} s)" in record_line
