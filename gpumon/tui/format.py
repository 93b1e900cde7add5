"""Dashboard words: process states (words or ps letters), GPU model names, counted nouns (numbers: gpumon.units)."""

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


_STATE_LETTERS = {
    "running": "R",
    "sleeping": "S",
    "disk-sleep": "D",
    "stopped": "T",
    "tracing-stop": "t",
    "zombie": "Z",
    "dead": "X",
    "wake-kill": "K",
    "waking": "W",
    "idle": "I",
    "locked": "L",
    "waiting": "W",
    "parked": "P",
}


def state_letter(state: str | None) -> str:
    """A psutil process status as ps's one letter ('disk-sleep' -> 'D'); '?' for none or one ps has no letter for."""
    return _STATE_LETTERS.get(state or "", "?")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """'1 job', '2 jobs', '0 jobs'; nouns: the plural where it is not noun + 's' ('1 process', '3 processes')."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def short_gpu_name(name: str) -> str:
    """The GPU model without the vendor prefix, made printable: 'NVIDIA H100 80GB HBM3' -> 'H100 80GB HBM3'."""
    for prefix in ("NVIDIA ", "Nvidia "):
        if name.startswith(prefix):
            return printable(name[len(prefix) :])
    return printable(name)
