"""gpumon.printable: every character a terminal could act on, or that reorders text, is shown escaped; everything
else is kept; ordinary strings cost one isprintable()."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.text import Span, Text

from gpumon.printable import escape_char, printable, printable_or
from gpumon.tui.printable_text import printable_text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;PWNED\x07\x1b[2J", "\\x1b]0;PWNED\\x07\\x1b[2J"),  # set the title, clear the screen
        ("a\x00b\x7fc", "a\\x00b\\x7fc"),  # NUL, DEL
        ("\x9b31m\x85\x90", "\\x9b31m\\x85\\x90"),  # C1: CSI, NEL, DCS
        ("tab\tnew\nline\rcr", "tab\\tnew\\nline\\rcr"),
        ("evil\u202eexe.txt", "evil\\u202eexe.txt"),  # right-to-left override
        ("\u2066iso\u2069\u200e\u200b\ufeff", "\\u2066iso\\u2069\\u200e\\u200b\\ufeff"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("bad\udcffbyte", "bad\\udcffbyte"),  # an undecodable byte of a command line (surrogateescape)
    ],
)
def test_controls_escapes_and_reordering_marks_are_shown_escaped(raw: str, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize(
    "kept",
    [
        "python train.py --lr 3e-4",
        "",
        "naïve 日本語 🚀 Ωmega",
        "nbsp\u00a0and\u3000ideographic space",
        "private\ue000use",
        "[bold]markup is not ours to escape[/bold]",
        "back\\slash \\x1b already text",
    ],
)
def test_printable_strings_are_returned_as_they_are(kept: str) -> None:
    assert printable(kept) == kept


@given(st.text())
def test_the_result_is_always_safe_and_printable_text_is_untouched(text: str) -> None:
    shown = printable(text)
    assert all(escape_char(char) == char for char in shown)
    assert not any(0x00 <= ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in shown)
    if text.isprintable():
        assert shown is text


def test_printable_or_takes_any_value_and_a_placeholder_for_none() -> None:
    assert printable_or(None) == "?"
    assert printable_or(None, "N/A") == "N/A"
    assert printable_or(8) == "8"
    assert printable_or("a\x1bb") == "a\\x1bb"


def test_a_styled_line_keeps_its_styles_around_the_escapes() -> None:
    line = Text("ab\x1bcd", spans=[Span(0, 2, "red"), Span(2, 5, "green")], no_wrap=True, end="")
    shown = printable_text(line)
    assert shown.plain == "ab\\x1bcd"
    assert [(span.start, span.end, span.style) for span in shown.spans] == [(0, 2, "red"), (2, 8, "green")]
    assert shown.no_wrap and shown.end == ""
    plain = Text("all fine", style="bold")
    assert printable_text(plain) is plain
    block = Text("one\ntwo\x1b")
    assert printable_text(block, multiline=True).plain == "one\ntwo\\x1b"
    assert printable_text(block).plain == "one\\ntwo\\x1b"


def test_ordinary_names_take_the_fast_path() -> None:
    """The dashboard makes every process name printable on every tick."""
    names = [f"python train_{index}.py --lr 3e-4 --batch {index}" for index in range(1000)]
    started = time.perf_counter()
    for _ in range(20):
        for name in names:
            assert printable(name) is name
    assert time.perf_counter() - started < 1.0
