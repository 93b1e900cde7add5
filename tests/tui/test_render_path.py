"""The dashboard's render path made cheaper draws exactly what it drew before: event marks, drawn lines."""

from __future__ import annotations

import pytest
from rich.text import Span, Text

from gpumon.sampling.history import THROTTLED
from gpumon.tui.graph import GraphStyle, drawn_text, event_marks


@pytest.mark.parametrize("style", list(GraphStyle))
def test_event_marks_without_events_are_one_empty_mark_a_cell_and_any_event_still_marks(style: GraphStyle) -> None:
    quiet: list[float | None] = [None, 0.0, None, 0.0, 0.0]
    cells = -(-len(quiet) // style.samples_per_cell)
    assert event_marks(quiet, style) == [None] * cells
    marked = event_marks([*quiet[:-1], float(THROTTLED)], style)
    assert (
        len(marked) == cells and marked[-1] is not None and marked[-1][0] == "!" and marked[:-1] == [None] * (cells - 1)
    )


def test_drawn_text_is_what_rich_text_makes_of_the_same_line() -> None:
    plain = "Util    44% 100┤⣿⣀ ·"
    spans = [Span(0, 4, "green"), Span(15, len(plain), "green")]
    expected = Text(plain, style="bright_black", no_wrap=True, end="", spans=list(spans))
    drawn = drawn_text(plain, list(spans), style="bright_black")
    assert (drawn.plain, drawn.spans, drawn.style, drawn.cell_len, drawn.end, drawn.no_wrap) == (
        expected.plain,
        expected.spans,
        expected.style,
        expected.cell_len,
        expected.end,
        expected.no_wrap,
    )
    drawn.truncate(6)
    assert drawn.plain == "Util  "
