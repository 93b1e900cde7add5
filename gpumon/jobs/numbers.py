"""clean_number: a number read from a hook message, kept only when it is one (finite, at least 0)."""

from __future__ import annotations

import math


def clean_number(value: object) -> float | None:
    """A finite number from a message, at least 0; None for anything else (a bool, a string, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return max(0.0, float(value))
