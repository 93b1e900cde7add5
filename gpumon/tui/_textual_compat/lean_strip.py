"""A Textual workaround: Strips whose caches are made when first used (checked on the Textual versions in CHECKED).

What it replaces, and why: `Strip.__init__` makes seven FIFOCaches (each an object and its dict) for every Strip, so a
Strip is 16 objects the garbage collector tracks. A pane keeps the Strips of its lines, so each line that changes
leaves 16 new objects that live on until the line changes again: in the dashboard's frames, most of the objects the
collector finds still alive, and so of its collections (in-process on the 2x H200 recording at 1 s: 323 young
collections in 300 snapshots with Textual's Strips, 169 with all of them lean). Most of the pane's Strips are never
cropped, divided or restyled, so their caches are never used.

`LeanStrip` sets only what `Strip.__init__` sets that is not a cache, and makes each cache, as `Strip.__init__` would
have, when a Strip method first reads it. It names `Strip`'s private slots and their sizes, so it is used only on the
Textual versions it was checked on; tests/tui/test_textual_lean_strip.py checks that every slot of Textual's Strip
reads the same on a LeanStrip.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.segment import Segment
from textual.cache import FIFOCache
from textual.strip import Strip

CACHE_SIZES = {
    "_divide_cache": 4,
    "_crop_cache": 16,
    "_style_cache": 16,
    "_filter_cache": 4,
    "_line_length_cache": 4,
    "_crop_extend_cache": 4,
    "_offsets_cache": 4,
}
"""Strip.__init__'s caches and their sizes."""


class LeanStrip(Strip):
    """A Strip whose caches are made when first used (see the module's docstring)."""

    __slots__ = ()

    def __init__(self, segments: Iterable[Segment], cell_length: int | None = None) -> None:
        self._segments = list(segments)
        self._cell_length = cell_length
        self._render_cache = None
        self._link_ids = None
        self._cell_count = None

    def __getattr__(self, name: str) -> FIFOCache[object, object]:
        # Called only for a slot not set yet: one of the caches, made on first use.
        size = CACHE_SIZES.get(name)
        if size is None:
            raise AttributeError(name)
        cache: FIFOCache[object, object] = FIFOCache(size)
        setattr(self, name, cache)
        return cache


def lean_strip(segments: list[Segment], cell_length: int | None = None) -> Strip:
    """`Strip(segments, cell_length)`, its caches made when first used."""
    return LeanStrip(segments, cell_length)
