"""The job's own code on the stack: the first frame outside torch, the standard library, site-packages and gpumon."""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType

MAX_DEPTH = 64
"""Frames walked at most (the walk runs only inside a diagnosis window or on a sampled step)."""


def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path) + os.sep)
            roots.add(os.path.normpath(path) + os.sep)
    gpumon_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots.add(gpumon_dir + os.sep)
    torch = sys.modules.get("torch")
    torch_file = getattr(torch, "__file__", None)
    if torch_file:
        roots.add(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return tuple(sorted(roots))


_ROOTS: tuple[str, ...] | None = None


def is_library_file(filename: str) -> bool:
    """True for torch, the standard library, site-/dist-packages, gpumon itself and frozen or built-in code."""
    global _ROOTS
    if not filename or filename.startswith("<frozen") or filename == "<built-in>":
        return True
    if "/site-packages/" in filename or "/dist-packages/" in filename:
        return True
    if _ROOTS is None:
        _ROOTS = _library_roots()
    return filename.startswith(_ROOTS)


def first_user_frame(frame: FrameType | None, max_depth: int = MAX_DEPTH) -> tuple[str, int] | None:
    """(file, line) of the innermost frame at or outside `frame` that is the job's own code; None when none is
    within `max_depth` frames."""
    depth = 0
    while frame is not None and depth < max_depth:
        code = frame.f_code
        if not is_library_file(code.co_filename):
            return code.co_filename, frame.f_lineno or 0  # None where the instruction has no line
        frame = frame.f_back
        depth += 1
    return None
