"""The characters the graphs, sparklines and bars are drawn with: Unicode (braille, eighth blocks) or plain ASCII
(--ascii, and by itself where the terminal cannot show more: a locale that is not UTF-8, or TERM=linux)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

_ascii = [False]
_on_change: list[Callable[[], None]] = []


def use_ascii(on: bool) -> None:
    """Draw in ASCII from now on (or not); the app sets it once at start. Caches of drawn cells are emptied."""
    if on != _ascii[0]:
        _ascii[0] = on
        for forget in _on_change:
            forget()


def ascii_only() -> bool:
    return _ascii[0]


def forget_on_change(forget: Callable[[], None]) -> None:
    """Call `forget` (a cache's clear) whenever the character set changes."""
    _on_change.append(forget)


def wants_ascii(environ: Mapping[str, str]) -> bool:
    """Whether the terminal likely cannot show braille and block characters: the Linux console (TERM=linux), or a
    locale whose character set is not UTF-8 (LC_ALL, else LC_CTYPE, else LANG; none set reads as UTF-8, as most
    terminal emulators are)."""
    if environ.get("TERM") == "linux":
        return True
    locale = next((environ[name] for name in ("LC_ALL", "LC_CTYPE", "LANG") if environ.get(name)), "")
    if not locale:
        return False
    normalized = locale.lower().replace("-", "")
    return "utf8" not in normalized


def pick(unicode: str, plain: str) -> str:
    """`unicode`, or `plain` where only ASCII is drawn."""
    return plain if _ascii[0] else unicode
