"""Human-readable formatting of bytes, rates, percentages and counts for the dashboard."""

from __future__ import annotations

import math

from gpumon.printable import printable

MISSING = "N/A"
_BINARY_UNITS = ("B", "K", "M", "G", "T", "P")
_COUNT_UNITS = ("", "k", "M", "G")
_STATE_ABBREVIATIONS = {
    "running": "run",
    "sleeping": "sleep",
    "disk-sleep": "disk",
    "stopped": "stop",
    "tracing-stop": "trace",
    "zombie": "zomb",
    "dead": "dead",
    "wake-kill": "wake",
    "waking": "wake",
    "idle": "idle",
    "locked": "lock",
    "waiting": "wait",
    "parked": "park",
}


def _finite(value: float | None) -> bool:
    return value is not None and not math.isnan(value) and not math.isinf(value)


def format_bytes(value: float | None, *, spaced: bool = False) -> str:
    """Bytes in binary units: 512 -> '512B', 1536 -> '1.5K', 85899345920 -> '80.0G' ('80.0 GiB' when spaced)."""
    if not _finite(value):
        return MISSING
    assert value is not None
    size = max(0.0, float(value))
    unit_index = 0
    while size >= 1024 and unit_index < len(_BINARY_UNITS) - 1:
        size /= 1024
        unit_index += 1
    unit = _BINARY_UNITS[unit_index]
    number = f"{size:.0f}" if unit_index == 0 or size >= 100 else f"{size:.1f}"
    if not spaced:
        return f"{number}{unit}"
    return f"{number} {unit}iB" if unit_index else f"{number} B"


def format_rate(value: float | None, *, spaced: bool = False) -> str:
    """Bytes per second: 1.2e9 -> '1.1G/s' ('1.1 GiB/s' when spaced)."""
    if not _finite(value):
        return MISSING
    return f"{format_bytes(value, spaced=spaced)}/s"


def format_percent(value: float | None) -> str:
    """A whole-number percentage, '97%', or N/A when the metric is absent."""
    if not _finite(value):
        return MISSING
    assert value is not None
    return f"{value:.0f}%"


def format_count(value: float | None) -> str:
    """A count with k/M suffixes: 950 -> '950', 3240 -> '3.2k'."""
    if not _finite(value):
        return MISSING
    assert value is not None
    number = max(0.0, float(value))
    unit_index = 0
    while number >= 1000 and unit_index < len(_COUNT_UNITS) - 1:
        number /= 1000
        unit_index += 1
    if unit_index == 0:
        return f"{number:.0f}"
    return f"{number:.0f}{_COUNT_UNITS[unit_index]}" if number >= 100 else f"{number:.1f}{_COUNT_UNITS[unit_index]}"


def format_state(state: str | None) -> str:
    """A psutil process status shortened to at most five characters ('disk-sleep' -> 'disk')."""
    if not state:
        return "?"
    return _STATE_ABBREVIATIONS.get(state, state[:5])


def short_gpu_name(name: str) -> str:
    """The GPU model without the vendor prefix, made printable: 'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3'."""
    for prefix in ("NVIDIA ", "Nvidia "):
        if name.startswith(prefix):
            return printable(name[len(prefix) :])
    return printable(name)
