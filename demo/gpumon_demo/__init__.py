"""gpumon's deliberately slow demo trainer; importing it does not import torch."""

from __future__ import annotations

import sys

from .knobs import KNOBS_ACK_ENV, KNOBS_ENV, KNOWN_KNOBS, Knob, KnobError, format_knobs, parse_knobs

__all__ = ["KNOBS_ACK_ENV", "KNOBS_ENV", "KNOWN_KNOBS", "Knob", "KnobError", "command", "format_knobs", "parse_knobs"]


def command(*args: str) -> list[str]:
    """The argv that runs the demo trainer with this interpreter, e.g. command("--duration", "30")."""
    return [sys.executable, "-m", __name__, *args]
