"""The hook's settings from environment variables: a bad value keeps the default and says so once, on stderr."""

from __future__ import annotations

import os
import sys

MAX_COUNT = 1_000_000
"""The largest "one step in N" a variable may ask for."""
_TRUE = ("1", "true", "on", "yes")
_FALSE = ("", "0", "false", "off", "no")
_said: set[str] = set()
_MAX_SAID = 32


def say_once(message: str) -> None:
    """One line on the job's stderr, once per message (the user set the variable, so the job's log is the place)."""
    if message in _said or len(_said) >= _MAX_SAID:
        return
    _said.add(message)
    try:
        print(f"gpumon hook: {message}", file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - a closed or broken stderr must not reach the job
        pass


def env_count(name: str, default: int) -> int:
    """A whole number 0..MAX_COUNT from `name`; unset or empty: `default`; anything else: `default`, said once."""
    given = env_count_given(name, default)
    return default if given is None else given


def env_count_given(name: str, default: int) -> int | None:
    """As env_count, but None where the default applies (unset, empty or unreadable: the latter said once)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if raw.isascii() and raw.isdigit() and int(raw) <= MAX_COUNT:
        return int(raw)
    say_once(f"{name}={raw[:40]!r} is not a whole number from 0 to {MAX_COUNT}; using {default}")
    return None


def env_switch(name: str) -> bool:
    """On for 1/true/on/yes, off when unset or 0/false/off/no; anything else: off, said once."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw not in _FALSE:
        say_once(f"{name}={raw[:40]!r} is not 1 or 0; left off")
    return False
