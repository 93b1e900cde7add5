"""Textual's installed version against gpumon's range, read before anything imports Textual: one line, not a crash."""

from __future__ import annotations

import importlib.util
import os
import re

REQUIREMENT = "textual>=8.0.0,<8.3"
"""As pyproject.toml says it (tests/test_textual_range.py holds the two the same)."""
LOWEST = (8, 0, 0)
BEYOND = (8, 3, 0)
INSTALL_BESIDE = (
    "install gpumon in an environment of its own beside it: `pipx install ./gpumon` (or `uv tool install ./gpumon`, "
    "or `python3 -m venv ~/.gpumon && ~/.gpumon/bin/pip install ./gpumon`, ./gpumon being its source)"
)


def installed_textual() -> tuple[str, str] | None:
    """Textual's version and directory, without importing it; None where it is not installed. The version comes from
    the name of the one dist-info beside the package (as _textual_compat reads it), else from importlib.metadata."""
    spec = importlib.util.find_spec("textual")
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = next(iter(spec.submodule_search_locations))
    prefix, suffix = "textual-", ".dist-info"
    try:
        site = os.path.dirname(package_dir)
        names = [name for name in os.listdir(site) if name.startswith(prefix) and name.endswith(suffix)]
    except OSError:
        names = []
    if len(names) == 1:
        return names[0][len(prefix) : -len(suffix)], package_dir
    from importlib import metadata

    try:
        return metadata.version("textual"), package_dir
    except metadata.PackageNotFoundError:
        return "unknown", package_dir


def release(version: str) -> tuple[int, int, int] | None:
    """The leading MAJOR.MINOR[.MICRO] of a version string, None where it has none."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def in_range(version: str) -> bool:
    """Whether a Textual of `version` is one REQUIREMENT allows (a pre-release of the upper bound is beyond it)."""
    parsed = release(version)
    return parsed is not None and LOWEST <= parsed < BEYOND


def textual_problem() -> str | None:
    """Why this environment's Textual cannot run gpumon, in one line; None when it is in the range."""
    installed = installed_textual()
    if installed is None:
        return f"gpumon needs Textual ({REQUIREMENT}), which is not installed here; {INSTALL_BESIDE}"
    version, where = installed
    if in_range(version):
        return None
    return f"gpumon needs {REQUIREMENT}, this environment has textual {version} ({where}); {INSTALL_BESIDE}"


def require_textual() -> None:
    """Before a command imports Textual: a Textual missing or outside the range is one line and exit 2 (headless
    commands never get here, so they run beside any Textual, or none)."""
    problem = textual_problem()
    if problem is not None:
        from gpumon.cli.base import CliError

        raise CliError(problem)
