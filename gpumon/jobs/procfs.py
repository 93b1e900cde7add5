"""A process's uid, arguments, command line and parent, read from /proc (nothing is opened but /proc's files)."""

from __future__ import annotations

import os


def process_uid(pid: int) -> int | None:
    """The real uid a process runs as (None when it is gone)."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def process_argv(pid: int) -> list[str]:
    """A process's arguments from /proc ([] when gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            raw = stream.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.removesuffix(b"\0").split(b"\0")] if raw else []


def process_command(pid: int) -> str:
    """A process's command line from /proc ('' when gone or unreadable)."""
    return " ".join(part for part in process_argv(pid) if part)


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc (None when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            data = stream.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def descends_from(pid: int, ancestor: int, max_depth: int = 64) -> bool:
    """True when `pid` is `ancestor` or one of its descendants (walking /proc parent links)."""
    current: int | None = pid
    for _ in range(max_depth):
        if current is None or current <= 1:
            return False
        if current == ancestor:
            return True
        current = parent_pid(current)
    return False
