"""Fixtures of the advisor tests: signals recorded from real runs."""

from __future__ import annotations

import pytest
from advisor_support import FIXTURES, load_case

from gpumon.advisor.signals import Signals


@pytest.fixture(scope="session")
def demo_signals() -> Signals:
    """The demo trainer with its slow defaults, hooked, on this CPU machine (tests/fixtures/advisor/demo-cpu.json)."""
    return load_case(FIXTURES / "demo-cpu.json")[1]
