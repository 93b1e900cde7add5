"""Dashboard words for outside values: process states and GPU model names (numbers are gpumon.units's)."""

from __future__ import annotations

from gpumon.printable import printable

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
