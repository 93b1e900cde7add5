"""The dashboard's render path made cheaper draws exactly what it drew before: event marks, drawn lines, segments."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region
from textual.strip import Strip
from tui_support import gpu, process, snapshot

from gpumon.sampling.history import THROTTLED, History
from gpumon.tui._textual_compat import SegmentBuilder, drawn_text
from gpumon.tui.gauge_graph import _AXIS_LINES, GraphView, time_axis_line
from gpumon.tui.gpu_pane import allot_rows, gauges
from gpumon.tui.graph import _SPACING, GraphStyle, event_marks


@pytest.mark.parametrize("style", list(GraphStyle))
def test_event_marks_without_events_are_one_empty_mark_a_cell_and_any_event_still_marks(style: GraphStyle) -> None:
    quiet: list[float | None] = [None, 0.0, None, 0.0, 0.0]
    cells = -(-len(quiet) // style.samples_per_cell)
    assert event_marks(quiet, style.samples_per_cell) == [None] * cells
    marked = event_marks([*quiet[:-1], float(THROTTLED)], style.samples_per_cell)
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


LINES = [
    Text("Util    44% 100┤⣿⣀ ·", spans=[Span(7, 11, "green"), Span(12, 16, "bright_black"), Span(16, 20, "green")]),
    Text("GPU0 H100  52°C", style="bold", spans=[Span(0, 4, "reverse"), Span(4, 10, "cyan")]),
    Text("back to back", spans=[Span(0, 4, "red"), Span(4, 7, "blue"), Span(8, 12, "")]),
    Text("overlapping", spans=[Span(0, 6, "red"), Span(3, 9, "underline")]),
    Text("out of order", spans=[Span(5, 8, "red"), Span(0, 2, "blue")]),
    Text("empty span", spans=[Span(3, 3, "red"), Span(4, 6, "blue")]),
    Text("past the end", spans=[Span(5, 40, "red")]),
    Text("no spans", style="bold"),
]


@pytest.mark.parametrize("line", LINES, ids=[line.plain for line in LINES])
@pytest.mark.parametrize("base", [Style(), Style(bgcolor="grey11"), Style(color="white", bgcolor="black")])
def test_segment_builder_draws_what_rich_and_textual_draw(line: Text, base: Style) -> None:
    console = Console(width=40, color_system="truecolor")
    width = 30
    expected = Strip(line.render(console, end=""), line.cell_len).adjust_cell_length(width).apply_style(base)
    builder = SegmentBuilder()
    for _ in range(2):  # the second time from the cached styles
        drawn = Strip(builder.segments(console, line, width, base), width)
        assert drawn.text == expected.text
        assert [(segment.text, segment.style) for segment in drawn.simplify()] == [
            (segment.text, segment.style) for segment in expected.simplify()
        ]


def test_allotted_rows_are_kept_per_layout_but_each_caller_gets_its_own_list() -> None:
    four = gauges(gpu(gpm=True))
    first = allot_rows(10, four)
    assert first == [4, 4, 1, 1]
    assert first is not None
    first[0] = 99
    assert allot_rows(10, four) == [4, 4, 1, 1]
    assert allot_rows(3, four) is None


def test_a_changed_line_sends_only_its_changed_cells_in_runs() -> None:
    from rich.text import Text
    from textual.geometry import Region

    from gpumon.tui.changed_cells import changed_regions

    def regions(old: str, new: str) -> list[Region]:
        return changed_regions(3, Text(old), Text(new), 20)

    assert regions("abcdefgh", "abXdeYgh") == [Region(2, 3, 4, 1)]  # two runs a few bytes apart: one
    assert regions("⠁⠂⠄⡀⢀", "⠂⠄⡀⢀⠠") == [Region(0, 3, 5, 1)]  # a graph row moved on: every cell
    assert regions("abcdefgh", "abcdefgX") == [Region(7, 3, 1, 1)]
    assert regions("abab", "abaa") == [Region(3, 3, 1, 1)]
    assert regions("aaaa", "aaab") == [Region(3, 3, 1, 1)]
    assert regions("abc", "abcd") == [Region(0, 3, 20, 1)]  # widths differ: the whole line
    assert regions("abc", "abc") == []
    # unchanged cells worth more bytes than a cursor move (3 braille cells, 9 bytes) split the runs
    assert regions("⣿⣀⣀⣀⣿⣀", "⣀⣀⣀⣀⣀⣀") == [Region(0, 3, 1, 1), Region(4, 3, 1, 1)]
    assert regions("⣿⣀⣀⣿⣀", "⣀⣀⣀⣀⣀") == [Region(0, 3, 4, 1)]  # 6 bytes between: one run
    assert regions("x" + "a" * 8 + "x", "y" + "a" * 8 + "y") == [Region(0, 3, 10, 1)]
    assert regions("x" + "a" * 9 + "x", "y" + "a" * 9 + "y") == [Region(0, 3, 1, 1), Region(10, 3, 1, 1)]


def test_a_colour_change_over_blank_cells_sends_nothing_and_one_over_marks_sends_those() -> None:
    from rich.style import Style
    from rich.text import Span, Text
    from textual.geometry import Region

    from gpumon.tui.changed_cells import changed_regions

    green, yellow, on_red = Style(color="green"), Style(color="yellow"), Style(bgcolor="red")
    row = "label │      ⣿⣿  "
    graph = row.index("⣿")

    def line(*spans: Span) -> Text:
        return Text(row, spans=list(spans))

    # the plot's colour follows the value: over its blank cells that shows nothing
    assert changed_regions(2, line(Span(7, graph, green)), line(Span(7, graph, yellow)), 20) == []
    assert changed_regions(2, line(Span(7, graph, "green")), line(Span(7, graph, "yellow")), 20) == []
    # over its marks it shows: only their cells go
    changed = changed_regions(2, line(Span(7, len(row), green)), line(Span(7, len(row), yellow)), 20)
    assert changed == [Region(graph, 2, 2, 1)]
    assert changed_regions(2, line(Span(graph, graph + 2, green)), line(Span(graph, graph + 2, yellow)), 20) == [
        Region(graph, 2, 2, 1)
    ]
    # a background shows on blanks too
    assert changed_regions(2, line(), line(Span(0, 3, on_red)), 20) == [Region(0, 2, 3, 1)]
    # a text change and a visible span change far apart: two runs
    moved = Text(row.replace("⣿⣿", "⣿⡀"), spans=[Span(0, 3, on_red)])
    assert changed_regions(2, line(), moved, 20) == [Region(0, 2, 3, 1), Region(graph + 1, 2, 1, 1)]


@pytest.mark.parametrize("style", list(GraphStyle))
def test_time_axis_lines_kept_between_redraws_are_the_ones_drawn_afresh(style: GraphStyle) -> None:
    """The axis kept by what it shows (gauge_graph._AXIS_LINES) and the spacing kept per sample added are what a
    redraw from nothing draws, at every step of a history whose marks and spacing change."""
    history = History()
    timestamp = 1000.0
    shown = set()
    for step in range(120):
        timestamp += 1.0 if step < 60 else 0.5
        reasons = ("SW Power Cap",) if step % 7 == 0 else ()
        running = (process(pid=100 + step // 5, gpu_indices=(0,)),) if step % 3 else ()
        history.add(snapshot(timestamp=timestamp, gpus=(gpu(0, throttle_reasons=reasons),), processes=running))
        for skip in (0, 3):
            view = GraphView(history, style, skip, {}, whole_cells=True)
            kept = time_axis_line(view, 60, "gpu0.events")
            assert time_axis_line(view, 60, "gpu0.events") is kept
            axes, spacing = dict(_AXIS_LINES), _SPACING[0]
            _AXIS_LINES.clear()
            _SPACING[0] = None
            fresh = time_axis_line(view, 60, "gpu0.events")
            _AXIS_LINES.clear()
            _AXIS_LINES.update(axes)
            _SPACING[0] = spacing
            assert (kept.plain, kept.spans, kept.style) == (fresh.plain, fresh.spans, fresh.style), (step, skip)
            shown.add(kept.plain)
    assert len(shown) > 30


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("abcdefgh", "abXdeYgh"),
        ("⠁⠂⠄⡀⢀", "⠂⠄⡀⢀⠠"),
        ("名前abc", "名后abd"),
        ("e\u0301x😀y", "e\u0300x😁y"),  # a combining mark and characters beyond the BMP
        ("a\ud800b", "a\udc00b"),  # lone surrogates, which only printable() would have escaped
        ("\U0010ffff\x00", "\U0010fffe\x00"),
        ("", ""),
    ],
)
def test_the_lanes_mark_exactly_the_characters_that_differ(first: str, second: str) -> None:
    """changed_cells compares two strings as ints of 32-bit lanes (UTF-32 codes): a lane is marked 1 where the
    characters differ, whatever the code point (beyond the BMP, lone surrogates, NUL)."""
    from gpumon.tui import changed_cells

    lanes = changed_cells._lanes(len(first))
    marks = changed_cells._nonzero(changed_cells._codes(first) ^ changed_cells._codes(second), lanes)
    assert list(marks.to_bytes(4 * len(first), "little")[0::4]) == [
        int(a != b) for a, b in zip(first, second, strict=True)
    ]


def test_lines_built_again_as_the_same_text_are_still_printable_and_cut_to_the_width() -> None:
    """LinesWidget.lines skips the printable pass and the cut for a Text it has fitted before (kept graph rows come back
    as the same Text); a Text that had to be escaped, or a width that changed, is fitted again."""
    from gpumon.tui.pane import LinesWidget

    escaped, long, plain = Text("a\x1bb"), Text("x" * 30), Text("fits")
    pane = LinesWidget()
    for width in (20, 20, 10, 10):
        pane._build = lambda _width: [escaped, long, plain]
        pane._lines = None
        lines = pane.lines(width)
        assert [line.plain for line in lines] == ["a\\x1bb", "x" * (width - 1) + "…", "fits"]
        assert lines[2] is plain
        assert escaped.plain == "a\x1bb"


_CELL_CHARACTERS = st.sampled_from([*" " * 12, "a", "b", "⠀", "⣿", "⡀", "│", "\U0010ffff", "\ud800", "😀"])
_SPAN_STYLES = st.sampled_from(["green", "yellow", "on red", "bold", "underline"])


def _spans(draw: st.DrawFn, length: int) -> list[Span]:
    spans = []
    for _ in range(draw(st.integers(0, 4))):
        start = draw(st.integers(0, length))
        spans.append(Span(start, draw(st.integers(start, length + 2)), draw(_SPAN_STYLES)))
    return spans


@st.composite
def _two_drawings(draw: st.DrawFn) -> tuple[Text, Text]:
    """A line and a later drawing of it: a few cells changed, its spans moved, added or dropped."""
    length = draw(st.integers(1, 40))
    before = draw(st.lists(_CELL_CHARACTERS, min_size=length, max_size=length))
    after = list(before)
    for cell in draw(st.lists(st.integers(0, length - 1), max_size=length // 3)):
        after[cell] = draw(_CELL_CHARACTERS)
    old_spans = _spans(draw, length)
    new_spans = draw(st.sampled_from([old_spans, old_spans[1:], _spans(draw, length)]))
    return Text("".join(before), spans=old_spans), Text("".join(after), spans=new_spans)


@settings(max_examples=300)
@given(_two_drawings())
def test_changed_regions_are_the_runs_of_cells_that_look_different(lines: tuple[Text, Text]) -> None:
    """Cell by cell: a cell changed where its character differs, or where a span only one drawing has covers it with
    a style a blank shows (a background, an underline) or over a mark; the regions are the runs of those cells,
    joined where the cells between take no more bytes than a cursor move."""
    from rich.cells import cell_len

    from gpumon.tui.changed_cells import changed_regions

    old, new = lines
    before, after = old.plain, new.plain
    regions = changed_regions(0, old, new, 60)
    if cell_len(before) != len(before) or cell_len(after) != len(after):
        assert regions == [Region(0, 0, 60, 1)]
        return
    expected = [a != b for a, b in zip(before, after, strict=True)]
    for span in set(old.spans) ^ set(new.spans):
        text = after if span in new.spans else before
        shows_on_blanks = span.style in ("on red", "underline")
        for cell in range(span.start, min(span.end, len(after))):
            expected[cell] = expected[cell] or shows_on_blanks or text[cell] != " "
    runs: list[list[int]] = []  # [first, end) of each run of changed cells, joined across gaps of 8 bytes or less
    for cell, changed in enumerate(expected):
        if not changed:
            continue
        if runs and (cell == runs[-1][1] or len(after[runs[-1][1] : cell].encode("utf-8", "surrogatepass")) <= 8):
            runs[-1][1] = cell + 1
        else:
            runs.append([cell, cell + 1])
    assert regions == [Region(first, 0, end - first, 1) for first, end in runs]


_CORE_PERCENTS = st.one_of(
    st.floats(0, 100), st.floats(-5, 105), st.none(), st.just(float("nan")), st.sampled_from([12.4, 12.6, 59.9, 60.1])
)


@settings(max_examples=150)
@example(samples=[[12.4, 0.0, 0.0], [12.6, 0.0, 0.0]], plain=True)  # one eighth-cell step, two whole-cell ASCII bars
@example(samples=[[None, 0.0, 0.0], [0.0, 0.0, 0.0]], plain=False)  # no figure is a blank bar, 0% a dotted one
@given(st.lists(st.lists(_CORE_PERCENTS, min_size=3, max_size=40), min_size=2, max_size=4), st.booleans())
def test_core_grid_lines_kept_between_samples_are_the_ones_drawn_afresh(
    samples: list[list[float | None]], plain: bool
) -> None:
    """The core grid's lines kept by what they show (cpu_pane._CORE_LINES) are what a build from nothing draws, in
    Unicode and in ASCII (whose bars round to whole cells), sample after sample (a line kept from an earlier sample
    stands for a later one only where it reads the same); a sample read again is handed back as the same Texts."""
    from gpumon.tui import cpu_pane
    from gpumon.tui.glyphs import use_ascii

    use_ascii(plain)
    try:
        width = 60
        for sample in samples:
            per_core = tuple(sample)  # type: ignore[arg-type]  # None: a core without a figure, as recorded
            kept = cpu_pane.labelled_core_lines(per_core, width)
            assert cpu_pane.labelled_core_lines(per_core, width) == kept
            assert all(a is b for a, b in zip(cpu_pane.labelled_core_lines(per_core, width), kept, strict=True))
            saved = dict(cpu_pane._CORE_LINES)
            cpu_pane._CORE_LINES.clear()
            fresh = cpu_pane.labelled_core_lines(per_core, width)
            cpu_pane._CORE_LINES.clear()
            cpu_pane._CORE_LINES.update(saved)
            assert [(line.plain, line.spans) for line in kept] == [(line.plain, line.spans) for line in fresh]
    finally:
        use_ascii(False)
