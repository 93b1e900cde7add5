"""Rich Text made printable for the terminal (gpumon.printable applied to a styled line, its styles kept)."""

from __future__ import annotations

from itertools import accumulate

from rich.text import Span, Text

from gpumon.printable import escape_char


def printable_text(text: Text, *, multiline: bool = False) -> Text:
    """`text` itself when printable; else a copy with each unprintable character escaped and the spans moved along.

    multiline: keep its newlines (a block of lines of our own making). Panes hand their lines to the compositor as
    they are (gpumon.tui.pane's fast path), so this is their last guard.
    """
    plain = text.plain
    if plain.isprintable():
        return text
    pieces = [char if multiline and char == "\n" else escape_char(char) for char in plain]
    if all(len(piece) == 1 for piece in pieces):
        return text
    offsets = [0, *accumulate(len(piece) for piece in pieces)]
    escaped = Text(
        "".join(pieces),
        style=text.style,
        justify=text.justify,
        overflow=text.overflow,
        no_wrap=text.no_wrap,
        end=text.end,
        tab_size=text.tab_size,
    )
    escaped.spans = [Span(offsets[span.start], offsets[min(span.end, len(plain))], span.style) for span in text.spans]
    return escaped
