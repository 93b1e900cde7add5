"""Unit tests of the pure rendering helpers: sparkline, bars, formatting, core grid, GPU density, process tree."""

from __future__ import annotations

from tui_support import GIB, gpu, process, snapshot

from gpumon import units
from gpumon.sampling.history import History
from gpumon.sampling.snapshot import DiskSample
from gpumon.tui.bar import bar_string
from gpumon.tui.cpu_pane import core_lines, cpu_lines
from gpumon.tui.disk_pane import rate_sparkline
from gpumon.tui.format import format_state, short_gpu_name
from gpumon.tui.gpu_pane import GRAPH_OFFSET, gpu_lines, header_lines
from gpumon.tui.process_table import LAST_BRANCH, tree_order
from gpumon.tui.sparkline import BLOCKS, Sparkline, spark_rows, spark_string


def test_sparkline_maps_0_to_lowest_and_100_to_full_block_whatever_the_other_values() -> None:
    assert spark_string([0.0, 100.0], 2) == BLOCKS[0] + BLOCKS[-1]
    # A window of values close together is NOT stretched to the window's min-max: 40-42% stay mid-height.
    assert spark_string([40.0, 41.0, 42.0], 3) == BLOCKS[3] * 3
    # 100 is the full block even when everything else is tiny, and 0 the lowest even when all else is high.
    assert spark_string([1.0, 2.0, 100.0], 3)[-1] == "█"
    assert spark_string([99.0, 98.0, 0.0], 3)[-1] == "▁"
    assert spark_string([50.0], 1) == BLOCKS[4]


def test_sparkline_clamps_draws_none_blank_and_right_aligns_short_history() -> None:
    assert spark_string([-5.0, 250.0], 2) == "▁█"
    assert spark_string([None, 100.0, None], 3) == " █ "
    assert spark_string([100.0], 4) == "   █"
    assert spark_string([0.0, 25.0, 50.0, 75.0, 100.0], 3) == spark_string([50.0, 75.0, 100.0], 3)
    assert spark_string([10.0, 20.0], 0) == ""


def test_sparkline_renderable_is_as_wide_as_asked() -> None:
    text = Sparkline([0.0, 100.0], width=5, style="green").text()
    assert text.plain == "   ▁█"
    assert str(text.style) == "green"


def test_tall_sparkline_stacks_its_levels_and_one_row_is_spark_string() -> None:
    values = [0.0, 50.0, 100.0, None, 30.0, 100.0, -5.0]
    assert spark_rows(values, 1, 7) == [spark_string(values, 7)]
    top, bottom = spark_rows([0.0, 50.0, 100.0, None], 2, 5)
    # Sixteen levels: 0% is the lowest block of the bottom line, 100% fills both lines, None stays blank.
    assert bottom == " ▁██ " and top == "  ▁█ "
    assert spark_rows([100.0], 3, 2) == [" █", " █", " █"]
    assert spark_rows([], 2, 3) == ["   ", "   "]


def test_gpu_graphs_grow_with_the_room_and_every_row_lines_up_with_its_label() -> None:
    one = snapshot(gpus=(gpu(0),))
    history = History()
    for util in (10.0, 60.0, 100.0):
        history.add(snapshot(gpus=(gpu(0, utilization_gpu=util),)))
    header = len(header_lines(one.gpus[0], 120))
    short = gpu_lines(one, history, 120, max_lines=header + 4)
    tall = gpu_lines(one, history, 120, max_lines=30)
    assert len(short) == header + 4 and len(tall) == 30
    mem = next(index for index, line in enumerate(tall) if line.plain.startswith("Mem"))
    util = [line.plain for line in tall[header:mem]]
    assert len(util) >= 4
    assert util[0].startswith("Util") and util[0][GRAPH_OFFSET - 4 : GRAPH_OFFSET] == "100┤"
    assert util[-1][GRAPH_OFFSET - 4 : GRAPH_OFFSET] == "  0┤"
    # Every row of the graph starts in the same column, right of its y-axis (the old tall mode started the second
    # row mid-line), and is as wide as the rest of the line.
    assert all(line[GRAPH_OFFSET - 1] in "┤│" and len(line) == 120 for line in util)
    # Braille: two samples a cell. The newest (100%) fills the left dots of the last cell in every row; the cell
    # before holds 10% (left dots in the bottom tenth of the rows) and 60% (right dots in the bottom 60%).
    left, right = 0x47, 0xB8
    dots = [ord(line[-2]) - 0x2800 if line[-2] != " " else 0 for line in util]
    assert all((ord(line[-1]) - 0x2800) & left == left for line in util)
    assert 1 <= sum(bool(cell & left) for cell in dots) <= 1 + len(util) // 5
    assert abs(sum(bool(cell & right) for cell in dots) / len(util) - 0.6) <= 0.15
    assert all(line.cell_len <= 120 for line in tall)


def test_rate_sparkline_scales_to_the_peak_of_the_window() -> None:
    history = History()
    for rate in (100e6, 200e6, 400e6):
        history.add(snapshot(disks=(DiskSample(name="nvme0n1", read_bytes_per_s=rate),)))
    # 400 MB/s is the top of this window: a quarter of it is level 2 of 0-7, half is level 4.
    assert rate_sparkline(history, "disk.nvme0n1.read", 3) == BLOCKS[2] + BLOCKS[4] + BLOCKS[7]
    # A disk idling at a few KiB/s draws flat rather than busy (the scale never tops out below 1 MiB/s).
    quiet = History()
    for rate in (1000.0, 4000.0):
        quiet.add(snapshot(disks=(DiskSample(name="sda", write_bytes_per_s=rate),)))
    assert rate_sparkline(quiet, "disk.sda.write", 2) == BLOCKS[0] * 2


def test_bar_fills_in_eighths() -> None:
    assert bar_string(0.0, 4) == "····"
    assert bar_string(100.0, 4) == "████"
    assert bar_string(50.0, 4) == "██··"
    assert bar_string(100.0 / 32, 4) == "▏···"  # one eighth of one of four cells
    assert bar_string(None, 3) == "   "


def test_an_ascii_bar_fills_whole_cells() -> None:
    """In ASCII a bar rounds to whole cells, where the same percents in eighths draw alike (cpu_pane keys its core
    grid lines by filled_steps, so the two must agree)."""
    from gpumon.tui.bar import filled_steps
    from gpumon.tui.glyphs import use_ascii

    assert filled_steps(12.4, 4) == filled_steps(12.6, 4) == 4 and filled_steps(None, 4) is None
    use_ascii(True)
    try:
        assert (bar_string(12.4, 4), bar_string(12.6, 4), bar_string(50.0, 4)) == ("....", "#...", "##..")
        assert (filled_steps(12.4, 4), filled_steps(12.6, 4)) == (0, 1)
    finally:
        use_ascii(False)


def test_formatting() -> None:
    """The dashboard's cells: compact binary sizes and rates (gpumon.units; its own edges in tests/test_units.py)."""
    assert units.size(512, compact=True) == "512B"
    assert units.size(1536, compact=True) == "1.5K"
    assert units.size(80 * GIB, compact=True) == "80.0G"
    assert units.size(503 * GIB, compact=True) == "503G"
    assert units.size(80 * GIB) == "80.0 GiB"
    assert units.size(None, compact=True) == "N/A"
    assert units.rate(1.5 * 1024**2, compact=True, binary=True) == "1.5M/s"
    assert units.percent(97.4) == "97%"
    assert units.percent(None) == "N/A"
    assert units.count(3240) == "3.2k"
    assert units.count(950) == "950"
    assert format_state("disk-sleep") == "disk"
    assert format_state(None) == "?"
    assert short_gpu_name("NVIDIA H100 80GB HBM3") == "H100 80GB HBM3"


def test_64_cores_fit_one_80_column_line_and_256_cores_four() -> None:
    cores = tuple(float(index % 101) for index in range(64))
    lines = core_lines(cores, 80, max_rows=1)
    assert len(lines) == 1
    assert lines[0].cell_len <= 80
    assert sum(character in BLOCKS for character in lines[0].plain) == 64
    many = core_lines(tuple(50.0 for _ in range(256)), 80, max_rows=1)
    assert len(many) == 4
    assert all(line.cell_len <= 80 for line in many)


def test_few_cores_get_labelled_bars_when_they_fit() -> None:
    lines = core_lines((10.0, 100.0, 0.0, 55.0), 80, max_rows=1)
    assert len(lines) == 1
    assert lines[0].plain.startswith("0 ")
    assert "1 ████" in lines[0].plain


def test_cpu_lines_wrap_the_summary_instead_of_cutting_it() -> None:
    history = History()
    sample = snapshot()
    history.add(sample)
    narrow = [line.plain for line in cpu_lines(sample.cpu, history, 40, 1)]
    assert all(len(line) <= 40 for line in narrow)
    joined = " ".join(narrow)
    for part in ("load", "iowait", "mem", "swap"):
        assert part in joined


def test_gpu_lines_fall_back_to_two_lines_then_one_line_per_gpu_when_many_gpus_must_fit() -> None:
    eight = snapshot(gpus=tuple(gpu(index) for index in range(8)))
    history = History()
    history.add(eight)
    roomy = gpu_lines(eight, history, 80, max_lines=100)
    assert len(roomy) == 96 and sum(line.plain.startswith("Util") for line in roomy) == 8
    compact = gpu_lines(eight, history, 80, max_lines=16)
    assert len(compact) == 16
    assert [line.plain.split()[0] for line in compact[::2]] == [str(index) for index in range(8)]
    assert all(line.plain.split()[:1] == ["U"] for line in compact[1::2]), "a one-row graph of each gauge"
    tight = gpu_lines(eight, history, 80, max_lines=8)
    assert len(tight) == 8
    assert all(line.cell_len <= 80 for line in tight)
    assert [line.plain.split()[0] for line in tight] == [str(index) for index in range(8)]


def test_gpu_error_is_one_line() -> None:
    broken = snapshot(gpus=(), gpu_error="NVIDIA driver not found (libnvidia-ml.so.1 missing)")
    lines = gpu_lines(broken, History(), 80, max_lines=6)
    assert [line.plain for line in lines] == ["GPU: NVIDIA driver not found (libnvidia-ml.so.1 missing)"]


def test_tree_order_sorts_jobs_and_keeps_each_jobs_workers_beneath_it() -> None:
    small = process(10, gpu_memory=1 * GIB, children=(process(11, cpu_percent=5.0), process(12, cpu_percent=90.0)))
    large = process(20, gpu_memory=9 * GIB, cpu_percent=1.0, children=(process(21, cpu_percent=50.0),))
    by_memory = [(p.pid, branch) for p, branch in tree_order([small, large], "gpu_memory", True)]
    assert by_memory == [(20, ""), (21, LAST_BRANCH), (10, ""), (11, "├─ "), (12, LAST_BRANCH)]
    by_cpu = [p.pid for p, _ in tree_order([small, large], "cpu_percent", True)]
    assert by_cpu == [10, 12, 11, 20, 21]
    ascending = [p.pid for p, _ in tree_order([small, large], "pid", False)]
    assert ascending == [10, 11, 12, 20, 21]


def test_tree_order_shows_a_pid_listed_twice_once() -> None:
    worker = process(11)
    rows = tree_order([process(10, children=(worker,)), process(11)], "pid", False)
    assert [p.pid for p, _ in rows] == [10, 11]
