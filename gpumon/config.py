"""The dashboard's config file ($XDG_CONFIG_HOME/gpumon/config.toml): typed Settings, read leniently, one key saved.

Reading: a bad value is one warning line naming the key, and that setting keeps its default (a bad `read_only` turns
read-only on: a typo must not enable signals); the unknown keys, however many, are one line naming the first few and
giving their count; a file that does not parse is one line and every default. Python 3.10 has no tomllib (and gpumon
does not depend on tomli): there the file is ignored with one line.

Writing (the theme picked in the command palette): `save_setting` rewrites or adds one top-level `key = value` line
and keeps every other line, comment and unknown key as it was; the result is parsed back before it replaces the file.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from gpumon.sampling.interval import MAX_INTERVAL_S, MIN_INTERVAL_S, interval_in_range


def _load_toml_parser() -> tuple[Callable[[str], dict[str, Any]], type[ValueError]] | None:
    """tomllib's loads and its error (Python 3.11+), or None (Python 3.10)."""
    try:
        tomllib = importlib.import_module("tomllib")
    except ImportError:
        return None
    return tomllib.loads, tomllib.TOMLDecodeError


TOML = _load_toml_parser()

GRAPH_STYLES = ("braille", "blocks")
"""The GPU graphs' styles (gpumon.tui.graph.GraphStyle values)."""
PANES = ("gpu", "cpu", "disk", "processes")
"""The panes `hidden_panes` may name."""
SORT_KEYS = ("gpu_memory", "sm_percent", "cpu_percent", "rss", "read", "write", "pid", "command")
"""The process table's sort columns (gpumon.tui.process_table.SORT_COLUMNS keys)."""
MAX_CONFIG_BYTES = 1 << 20
"""A config file larger than this is not read (it cannot be one we or a person wrote)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """What the config file sets; every field has the default used without a file."""

    interval: float = 1.0
    """Seconds between samples (the command line's --interval wins)."""
    theme: str = "textual-dark"
    """A Textual theme name; the one picked in the command palette is saved here."""
    graph_style: str = "braille"
    """The GPU graphs: braille (2x4 dots a cell) or blocks."""
    hidden_panes: tuple[str, ...] = ()
    """Panes not shown: any of gpu, cpu, disk, processes."""
    read_only: bool = False
    """No process control (no signals); --read-only sets it too."""
    default_sort: str = "gpu_memory"
    """The process table's first sort column."""
    host_graphs: bool = True
    """The CPU and memory history graphs in the side column beside the GPU pane (wide terminals; `h` toggles them).
    On by default, so the side column has no blank block; `host_graphs = false` saves their CPU cost
    (benchmarks/README.md, "Dashboard CPU cost")."""


def config_path(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/gpumon/config.toml, or ~/.config/gpumon/config.toml (a relative XDG_CONFIG_HOME is ignored,
    as the XDG spec says)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path(environ.get("HOME") or Path.home()) / ".config"
    return root / "gpumon" / "config.toml"


def _interval(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not interval_in_range(value):
        raise ValueError(f"a number of seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}")
    return float(value)


def _name(value: object) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", value):
        raise ValueError("a theme name (letters, digits, - _ .)")
    return value


def _choice(choices: tuple[str, ...]) -> Callable[[object], str]:
    def check(value: object) -> str:
        if value not in choices:
            raise ValueError("one of " + ", ".join(choices))
        return str(value)

    return check


def _panes(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(pane in PANES for pane in value):
        raise ValueError("a list of " + ", ".join(PANES))
    return tuple(dict.fromkeys(value))


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


_CHECKS = {
    "interval": _interval,
    "theme": _name,
    "graph_style": _choice(GRAPH_STYLES),
    "hidden_panes": _panes,
    "read_only": _bool,
    "default_sort": _choice(SORT_KEYS),
    "host_graphs": _bool,
}
assert set(_CHECKS) == {field.name for field in fields(Settings)}
UNKNOWN_KEYS_NAMED = 5
"""Unknown keys named in the one line that says how many there are."""
_SAFE_WHEN_BAD: dict[str, Any] = {"read_only": True}
"""Settings whose bad value is read as the safe one, not the default: `read_only = "yes"` means no signals."""


def _shown(value: object) -> str:
    """A bad value, short and printable, for a warning."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _unknown_keys_line(source: str, unknown: list[str]) -> str:
    """One warning for every unknown key: the first few named, and how many there are."""
    known = f"(known: {', '.join(_CHECKS)})"
    if len(unknown) == 1:
        return f"{source}: unknown key {_shown_key(unknown[0])} ignored {known}"
    named = ", ".join(_shown_key(key) for key in unknown[:UNKNOWN_KEYS_NAMED])
    more = ", ..." if len(unknown) > UNKNOWN_KEYS_NAMED else ""
    return f"{source}: {len(unknown)} unknown keys ignored: {named}{more} {known}"


def _shown_key(key: str) -> str:
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "..."


def settings_from(data: Mapping[str, Any], source: str = "config") -> tuple[Settings, list[str]]:
    """Settings from a parsed TOML table, and warning lines: one per bad value (which keeps its default), one for
    all the unknown keys (where the first of them is)."""
    warnings: list[str] = []
    values: dict[str, Any] = {}
    unknown: list[str] = []
    unknown_at = 0
    for key, value in data.items():
        check = _CHECKS.get(key)
        if check is None:
            if not unknown:
                unknown_at = len(warnings)
            unknown.append(key)
            continue
        try:
            values[key] = check(value)
        except ValueError as error:
            if key in _SAFE_WHEN_BAD:
                values[key] = _SAFE_WHEN_BAD[key]
                used = f"{key} = {toml_value(values[key])} is used, the safe side"
            else:
                used = "the default is used"
            warnings.append(f"{source}: {key} = {_shown(value)} is not {error}; {used}")
    if unknown:
        warnings.insert(unknown_at, _unknown_keys_line(source, unknown))
    return replace(Settings(), **values), warnings


def _read_regular(path: Path) -> bytes:
    """Up to MAX_CONFIG_BYTES + 1 bytes of `path`; OSError unless it is a regular file (a FIFO there would block the
    start forever: it is opened without waiting for a writer and refused)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return file.read(MAX_CONFIG_BYTES + 1)


def _parse(loads: Callable[[str], dict[str, Any]], text: str) -> dict[str, Any]:
    """tomllib's loads, with nesting too deep for its recursion as a ValueError (one line, not a traceback)."""
    try:
        return loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load_settings(path: Path | None = None) -> tuple[Settings, list[str]]:
    """The settings in the config file (defaults where there is none), and one line per problem."""
    path = config_path() if path is None else path
    try:
        raw = _read_regular(path)
    except FileNotFoundError:
        return Settings(), []
    except OSError as error:
        return Settings(), [f"config: cannot read {path}: {error.strerror or error}; defaults used"]
    if len(raw) > MAX_CONFIG_BYTES:
        return Settings(), [f"config: {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB; defaults used"]
    if TOML is None:
        return Settings(), [f"config: Python 3.10 has no tomllib; {path} is ignored (defaults used)"]
    loads = TOML[0]
    try:
        data = _parse(loads, raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        return Settings(), [f"config: {path}: {error}; defaults used"]
    return settings_from(data, f"config {path}")


def toml_value(value: str | bool | float | tuple[str, ...]) -> str:
    """A flat value in TOML: strings as basic strings (JSON's escapes are TOML's), booleans, numbers, string lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(json.dumps(item) for item in value) + "]"
    return json.dumps(value)


_TABLE_HEADER = re.compile(r"\s*\[")


def _with_setting(text: str, key: str, value: str) -> str:
    """The file's text with the top-level `key = ...` line replaced, or a new one added before the first table."""
    lines = text.splitlines(keepends=True)
    assignment = re.compile(rf"\s*{re.escape(key)}\s*=")
    new_line = f"{key} = {value}\n"
    first_table = next((index for index, line in enumerate(lines) if _TABLE_HEADER.match(line)), len(lines))
    for index in range(first_table):
        if assignment.match(lines[index]):
            lines[index] = new_line
            return "".join(lines)
    if first_table and not lines[first_table - 1].endswith("\n"):
        lines[first_table - 1] += "\n"
    lines.insert(first_table, new_line)
    return "".join(lines)


def save_setting(key: str, value: str | bool | float | tuple[str, ...], path: Path | None = None) -> str | None:
    """Set one top-level key in the config file, keeping everything else; None when saved, else why not (one line).

    The new text is parsed back and must hold the new value and every other key unchanged before it replaces the
    file (atomically), so a file we cannot edit line by line is left alone.
    """
    if key not in _CHECKS:
        return f"config: {key!r} is not a setting"
    if TOML is None:
        return "config: Python 3.10 has no tomllib; the setting is not saved"
    loads = TOML[0]
    path = config_path() if path is None else path
    try:
        try:
            raw = _read_regular(path)
        except FileNotFoundError:
            raw = b""
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"larger than {MAX_CONFIG_BYTES >> 20} MiB")
        old = raw.decode("utf-8")
        before = _parse(loads, old)
        new = _with_setting(old, key, toml_value(value))
        after = _parse(loads, new)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"config: {key} not saved to {path}: {error}"
    expected = dict(before, **{key: list(value) if isinstance(value, tuple) else value})
    if after != expected:
        return f"config: {key} not saved: {path} has a layout gpumon cannot edit line by line"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=".config.", suffix=".toml", dir=path.parent)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as file:
                file.write(new)
            if path.exists():
                os.chmod(temporary, path.stat().st_mode & 0o777)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as error:
        return f"config: {key} not saved to {path}: {error.strerror or error}"
    return None
