"""Fewer bytes to the terminal: each frame's colour and attribute sequences (SGR) cut to the changes between styles.

Rich ends every styled run with a reset (ESC[0m) and starts the next with its whole style, so a frame of graphs is a
third escape codes. `compact_sgr` keeps what the terminal shows and drops the rest: a reset when the next style
overrides all it would clear, a style the terminal already has, and a style set before text that never comes. It
models SGR as the terminal does (cumulative; 0 resets) and passes a frame through unchanged where it meets a code it
does not model. `compacting_driver` applies it to every write of a Textual driver (Driver.write: public API).
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from textual.driver import Driver

_SGR = re.compile(r"\x1b\[([0-9;]*)m")
_NEUTRAL = re.compile(r"(?:\x1b\[[0-9]*(?:;[0-9]*)?[HABCDf]|\n|\r)*")
"""Cursor moves and line breaks: they neither draw nor erase, so the style in effect does not matter to them."""
_FLAGS_OFF = {22: (1, 2), 23: (3,), 24: (4,), 25: (5, 6), 27: (7,), 28: (8,), 29: (9,)}
RESET = "\x1b[0m"
_CACHE_MAX = 4096
"""Styles and transitions remembered (a dashboard uses a few dozen): a frame's hundreds of runs cost a lookup each."""


class Style(NamedTuple):
    """The SGR state: attribute codes on (1-9), and the foreground and background as their codes (None: default).

    A NamedTuple, whose hash and equality are the tuple's, in C: a frozen dataclass's, in Python, were about 40% of
    compact_sgr's time."""

    flags: frozenset[int] = frozenset()
    fg: str | None = None
    bg: str | None = None

    def codes(self) -> list[str]:
        return [*(str(flag) for flag in sorted(self.flags)), *(c for c in (self.fg, self.bg) if c is not None)]


DEFAULT = Style()


@functools.lru_cache(maxsize=_CACHE_MAX)
def _apply(style: Style, params: str) -> Style | None:
    """`style` after one SGR with `params`; None for a code this model does not know."""
    numbers = [int(part) if part else 0 for part in params.split(";")] if params else [0]
    flags, fg, bg = set(style.flags), style.fg, style.bg
    index = 0
    while index < len(numbers):
        code = numbers[index]
        if code == 0:
            flags, fg, bg = set(), None, None
        elif 1 <= code <= 9:
            flags.add(code)
        elif code in _FLAGS_OFF:
            flags.difference_update(_FLAGS_OFF[code])
        elif 30 <= code <= 37 or 90 <= code <= 97:
            fg = str(code)
        elif 40 <= code <= 47 or 100 <= code <= 107:
            bg = str(code)
        elif code == 39:
            fg = None
        elif code == 49:
            bg = None
        elif code in (38, 48):
            mode = numbers[index + 1] if index + 1 < len(numbers) else -1
            width = 3 if mode == 5 else 5 if mode == 2 else 0
            if not width or index + width > len(numbers):
                return None
            color = ";".join(str(number) for number in numbers[index : index + width])
            fg, bg = (color, bg) if code == 38 else (fg, color)
            index += width - 1
        else:
            return None
        index += 1
    return Style(frozenset(flags), fg, bg)


@functools.lru_cache(maxsize=_CACHE_MAX)
def _transition(terminal: Style | None, wanted: Style) -> str:
    """The shortest SGR this model knows that takes the terminal from `terminal` (None: unknown) to `wanted`."""
    if terminal == wanted:
        return ""
    if (
        terminal is None
        or terminal.flags - wanted.flags
        or (terminal.fg is not None and wanted.fg is None)
        or (terminal.bg is not None and wanted.bg is None)
    ):
        codes = wanted.codes()
        return RESET + (f"\x1b[{';'.join(codes)}m" if codes else "")
    changes = [str(flag) for flag in sorted(wanted.flags - terminal.flags)]
    changes += [color for old, color in ((terminal.fg, wanted.fg), (terminal.bg, wanted.bg)) if color != old and color]
    return f"\x1b[{';'.join(changes)}m"


def compact_sgr(data: str) -> str:
    """`data` with its SGR sequences cut to the style changes its visible output needs; unchanged where it holds an
    SGR code the model does not know. The terminal's style before `data` is taken as unknown, and it ends in the style
    `data` leaves."""
    if "\x1b[" not in data:
        return data
    parts = _SGR.split(data)  # text, params, text, params, ..., text
    out: list[str] = []
    append = out.append
    neutral = _NEUTRAL.fullmatch
    terminal: Style | None = None
    wanted: Style | None = None
    for index in range(0, len(parts), 2):
        gap = parts[index]
        if gap:
            if wanted is not terminal and wanted is not None and wanted != terminal and not neutral(gap):
                append(_transition(terminal, wanted))
                terminal = wanted
            append(gap)
        if index + 1 == len(parts):
            break
        params = parts[index + 1]
        if wanted is None and not (params in ("", "0") or params.startswith("0;")):
            append(f"\x1b[{params}m")  # on top of a style we do not know: passed on as it is
            continue
        after = _apply(wanted if wanted is not None else DEFAULT, params)
        if after is None:
            return data
        wanted = after
    if wanted is not None and wanted != terminal:
        append(_transition(terminal, wanted))
    return "".join(out)


def compacting_driver(base: type[Driver]) -> type[Driver]:
    """`base` whose writes go out through compact_sgr."""

    class CompactingDriver(base):  # type: ignore[misc,valid-type]  # a subclass of the driver class given
        def write(self, data: str) -> None:
            super().write(compact_sgr(data))

    CompactingDriver.__name__ = f"Compacting{base.__name__}"
    CompactingDriver.__qualname__ = CompactingDriver.__name__
    return CompactingDriver


__all__ = ["compact_sgr", "compacting_driver"]
