"""Strings from outside (process names, argv, recordings, hook messages) made safe to show on a terminal.

Every character a terminal could act on, or that could hide or reorder the text around it, is shown visibly in
Python's escape notation instead: C0 controls, DEL and C1 controls (`\\x1b`, `\\x07`, `\\x9b`; tab, newline and
carriage return as `\\t`, `\\n`, `\\r`), Unicode format characters such as the bidi overrides (`\\u202e`), line and
paragraph separators, and lone surrogates (undecodable bytes of a command line). A lone escape sequence thus shows
as `\\x1b[2J` and does nothing. Everything else, including wide and private-use characters, is kept as it is.

Stdlib only: every layer (hook included) may import it.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls, format characters (bidi overrides, zero-width marks), surrogates, line and paragraph separators."""
_CACHE_SIZE = 4096
"""Distinct unprintable strings remembered (process names repeat every tick); bounds the cache's memory."""


def escape_char(char: str) -> str:
    """One character in escape notation if a terminal could act on it, else the character itself."""
    if unicodedata.category(char) not in _ESCAPED_CATEGORIES:
        return char
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _escaped(text: str) -> str:
    return "".join(escape_char(char) for char in text)


def printable(text: str) -> str:
    """`text` with every control, format and separator character shown escaped: 'a\\x1b[2Jb' -> 'a\\\\x1b[2Jb'.

    Costs one str.isprintable() for an ordinary string (the dashboard calls it per process per tick).
    """
    if text.isprintable():
        return text
    return _escaped(text)


def printable_or(value: object, missing: str = "?") -> str:
    """str(value) made printable; `missing` for None (a field an outside message may leave out)."""
    return missing if value is None else printable(str(value))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF: one byte that was not UTF-8, as os/sys decode it (surrogateescape): show the byte itself.
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def escape_surrogates(text: str) -> str:
    """`text` with every lone surrogate written out, so it encodes as UTF-8: 'a\\udcffb' -> 'a\\\\xffb'.

    An undecodable byte of argv, a path or the environment (which Python holds as U+DC80..U+DCFF) shows as the
    byte (`\\xff`); any other lone surrogate as `\\udNNN`. Other characters are kept.
    """
    return _LONE_SURROGATE.sub(_surrogate_escape, text)
