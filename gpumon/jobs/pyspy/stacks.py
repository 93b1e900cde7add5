"""py-spy's output: frames and thread stacks, parsed from its `record --format raw`, `dump` and `dump --json`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame as py-spy prints it: 'Class.function' (newer Pythons give the qualified name), file, line."""

    name: str
    file: str
    line: int = 0

    @property
    def function(self) -> str:
        """The function's own name, without its class or module (the part after the last dot)."""
        return self.name.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.name} ({self.file}:{self.line})"


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread's stack in one sample (or `count` identical samples); frames innermost first."""

    thread_id: int | None
    thread_name: str
    frames: tuple[Frame, ...]
    count: int = 1
    active: bool | None = None


_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")
_RAW_THREAD = re.compile(r"^thread \((?P<tid>[0-9a-fA-Fx]+)\)(?:: (?P<name>.*))?$")
_DUMP_THREAD = re.compile(r'^Thread (?P<tid>0x[0-9a-fA-F]+|\d+)(?: \((?P<status>[^)]*)\))?(?:: "(?P<name>.*)")?')


def parse_frame(text: str) -> Frame:
    """A frame from py-spy's 'function (file:line)' text."""
    match = _FRAME.match(text.strip())
    if match is None:
        return Frame(name=text.strip(), file="")
    return Frame(name=match["name"], file=match["file"], line=int(match["line"] or 0))


def _parse_tid(text: str) -> int | None:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_raw(text: str) -> list[ThreadStack]:
    """`py-spy record --format raw --threads` output: 'thread (TID): NAME;outer (f:l);...;inner (f:l) COUNT'."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        line = line.rstrip()
        head, _, count_text = line.rpartition(" ")
        if not head or not count_text.isdigit():
            continue
        parts = head.split(";")
        thread_id, thread_name = None, ""
        match = _RAW_THREAD.match(parts[0])
        if match is not None:
            thread_id, thread_name = _parse_tid(match["tid"]), match["name"] or ""
            parts = parts[1:]
        frames = tuple(parse_frame(part) for part in reversed(parts) if part)
        stacks.append(ThreadStack(thread_id, thread_name, frames, int(count_text)))
    return stacks


def parse_dump(text: str) -> list[ThreadStack]:
    """`py-spy dump` text output: 'Thread 123 (active): "MainThread"' then frames, innermost first."""
    stacks: list[ThreadStack] = []
    current: tuple[int | None, str, bool | None] | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        match = _DUMP_THREAD.match(line)
        if match is not None:
            if current is not None:
                stacks.append(ThreadStack(current[0], current[1], tuple(frames), 1, current[2]))
            status = match["status"] or ""
            current = (_parse_tid(match["tid"]), match["name"] or "", "active" in status if status else None)
            frames = []
        elif current is not None and line.startswith(" ") and line.strip():
            frames.append(parse_frame(line))
    if current is not None:
        stacks.append(ThreadStack(current[0], current[1], tuple(frames), 1, current[2]))
    return stacks


def parse_dump_json(text: str) -> list[ThreadStack]:
    """`py-spy dump --json` output."""
    stacks = []
    for thread in json.loads(text):
        frames = tuple(
            Frame(
                name=str(f.get("name", "")),
                file=str(f.get("filename") or f.get("short_filename", "")),
                line=int(f.get("line") or 0),
            )
            for f in thread.get("frames", [])
        )
        tid = thread.get("os_thread_id") or thread.get("thread_id")
        stacks.append(
            ThreadStack(
                tid if isinstance(tid, int) else None,
                str(thread.get("thread_name") or ""),
                frames,
                1,
                thread.get("active"),
            )
        )
    return stacks


def main_thread_stacks(stacks: Iterable[ThreadStack], pid: int | None = None) -> list[ThreadStack]:
    """The main thread's stacks: its OS thread id is the pid; failing that, the thread named MainThread."""
    stacks = list(stacks)
    if pid is not None:
        by_tid = [stack for stack in stacks if stack.thread_id == pid]
        if by_tid:
            return by_tid
    return [stack for stack in stacks if stack.thread_name == "MainThread"]
