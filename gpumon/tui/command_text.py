"""A process's command line as a narrow column shows it: from what matters (the script, the program), not a path."""

from __future__ import annotations

import posixpath
import re

_PYTHON = re.compile(r"(python|pypy)[0-9.]*[a-z]?")
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})


def _base(token: str) -> str:
    return posixpath.basename(token.rstrip("/")) or token


def what_matters(command: str) -> str:
    """The command line from what tells the processes apart: a Python script's name and its arguments
    ('/opt/venv/bin/python3 -u /tmp/x/train.py --lr 3' -> 'train.py --lr 3'); `python -m mod` and `python -c` with
    the interpreter's directory dropped ('python3 -m demo ...'); any other program by its name ('/usr/bin/vllm serve'
    -> 'vllm serve')."""
    tokens = command.split(" ")
    program = _base(tokens[0])
    if not _PYTHON.fullmatch(program):
        return " ".join([program, *tokens[1:]])
    position = 1
    while position < len(tokens):
        token = tokens[position]
        if token in ("-m", "-c") or (token.startswith(("-m", "-c")) and not token.startswith("--")):
            return " ".join([program, *tokens[position:]])
        if not token.startswith("-") or token == "-":
            return " ".join([_base(token), *tokens[position + 1 :]])
        position += 2 if token in _PYTHON_OPTIONS_WITH_VALUE else 1
    return " ".join([program, *tokens[1:]])


def command_shown(command: str, width: int) -> str:
    """The whole command line where it fits `width` cells; else from what matters (the cell's ellipsis cuts the
    rest)."""
    return command if len(command) <= width else what_matters(command)
