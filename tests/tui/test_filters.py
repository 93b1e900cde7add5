"""Filters and selection: `/` live by command line, user or pid (Esc clears), --user, --only / --only-visible, the
config file's settings on the dashboard, and the theme picked saved."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual import events
from tui_support import FakeSource, gpu, process, snapshot, widget_text

from gpumon.cli import build_parser
from gpumon.config import Settings, load_settings
from gpumon.sampling.gpu_choice import visible_devices
from gpumon.tui.app import GpumonApp
from gpumon.tui.cpu_pane import CpuPane
from gpumon.tui.disk_pane import DiskPane
from gpumon.tui.filter_input import FilterInput
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.graph import GraphStyle
from gpumon.tui.process_table import ProcessTable, filter_tree
from gpumon.tui.view_options import ViewOptions

PROCESSES = (
    process(
        100,
        user="alice",
        command="python train.py --lr 3e-4",
        gpu_indices=(0,),
        children=(process(101, user="alice", command="pt_data_worker"),),
    ),
    process(200, user="bob", command="python eval.py", gpu_indices=(1,)),
    process(300, user="carol", command="vllm serve", gpu_indices=(0, 1)),
)


def two_gpus() -> object:
    return snapshot(gpus=(gpu(0), gpu(1)), processes=PROCESSES)


async def test_slash_filters_live_by_command_user_or_pid_and_escape_clears() -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(120, 30)) as pilot:
        source.push(two_gpus())  # type: ignore[arg-type]
        await pilot.pause()
        table = app.query_one(ProcessTable)
        line = app.query_one(FilterInput)
        assert table.pids == [100, 101, 200, 300] and not line.display
        await pilot.press("slash")
        assert line.display and line.has_focus
        await pilot.press(*"EVAL")
        assert table.pids == [200]
        assert "filter 'EVAL'" in str(table.border_title)
        await pilot.press(*["backspace"] * 4, *"bob")  # a user
        assert table.pids == [200]
        await pilot.press(*["backspace"] * 3, "3", "0")  # the start of a pid
        assert table.pids == [300]
        await pilot.press(*["backspace"] * 2, *"worker")  # a child: shown under its parent
        assert table.pids == [100, 101]
        await pilot.press("enter")
        assert table.has_focus and line.display and table.pids == [100, 101]
        await pilot.press("escape")
        assert table.pids == [100, 101, 200, 300] and not line.display and table.has_focus
        await pilot.press("slash", "x", "escape")
        assert table.pids == [100, 101, 200, 300] and table.filter_text == ""


async def test_user_and_only_gpus_show_their_processes_and_gpus() -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source, options=ViewOptions(user="carol", gpus=frozenset({"1"})))
    async with app.run_test(size=(120, 30)) as pilot:
        source.push(two_gpus())  # type: ignore[arg-type]
        await pilot.pause()
        assert app.query_one(ProcessTable).pids == [300]
        assert app.snapshot is not None and [shown.index for shown in app.snapshot.gpus] == [1]
    none_left = ViewOptions(gpus=frozenset({"7"})).apply(two_gpus())  # type: ignore[arg-type]
    assert none_left.gpus == () and none_left.processes == () and none_left.gpu_error == "no GPU here matches 7"
    by_uuid = ViewOptions(gpus=frozenset({"GPU-0"})).apply(two_gpus())  # type: ignore[arg-type]
    assert [shown.index for shown in by_uuid.gpus] == [0] and [p.pid for p in by_uuid.processes] == [100, 300]


def test_filter_tree_keeps_ancestors_of_a_deep_match() -> None:
    deep = process(
        1,
        command="init",
        children=(
            process(
                2,
                command="sshd",
                children=(process(3, command="bash", children=(process(4, command="python needle.py"),)),),
            ),
        ),
    )
    [kept] = filter_tree((deep, process(9, command="other")), "NEEDLE")
    assert kept.pid == 1 and kept.children[0].children[0].children[0].pid == 4
    assert filter_tree((deep,), "nothing") == ()


def test_cuda_visible_devices_as_cuda_reads_it() -> None:
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0,2"}) == frozenset({"0", "2"})
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-8f3c,1"}) == frozenset({"GPU-8f3c", "1"})
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "1,-1,0"}) == frozenset({"1"})  # CUDA stops at -1
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == frozenset()


def test_view_flags_parse_and_bad_ones_are_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["--only", "0, 2", "--user", "bob", "--read-only"])
    assert args.only == frozenset({"0", "2"}) and args.user == "bob" and args.read_only and args.interval is None
    replay = build_parser().parse_args(["replay", "run.jsonl", "--only-visible"])
    assert replay.only_visible and replay.only is None
    for bad in (["--only", "0,;rm"], ["--only", "1", "--only-visible"], ["replay", "x", "--only", ""]):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(bad)
        assert exit_.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


async def test_the_config_sets_theme_graph_style_sort_and_hidden_panes() -> None:
    settings = Settings(theme="nord", graph_style="blocks", default_sort="pid", hidden_panes=("cpu", "disk"))
    app = GpumonApp(FakeSource(), options=ViewOptions(settings=settings, warnings=("config x: unknown key 'y'",)))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        assert app.theme == "nord"
        assert app.query_one(GpuPane).graph_style is GraphStyle.BLOCKS
        assert app.query_one(ProcessTable).sort_column == "pid"
        assert not app.query_one(CpuPane).display and not app.query_one(DiskPane).display
        assert app.query_one(GpuPane).display
        assert "config x: unknown key 'y'" in [str(note.message) for note in app._notifications]


async def test_an_unknown_theme_is_one_notification_and_the_default(tmp_path: Path) -> None:
    app = GpumonApp(FakeSource(), options=ViewOptions(settings=Settings(theme="no-such-theme")))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.theme == "textual-dark"
        assert any("no-such-theme" in str(note.message) for note in app._notifications)


async def test_the_theme_picked_is_saved_and_other_lines_kept(tmp_path: Path) -> None:
    path = tmp_path / "gpumon" / "config.toml"
    path.parent.mkdir()
    path.write_text("# mine\nread_only = false\n")
    app = GpumonApp(FakeSource(), options=ViewOptions(config_file=path))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert path.read_text() == "# mine\nread_only = false\n"  # starting saves nothing
        app.theme = "dracula"  # what the command palette's theme picker does
        await pilot.pause()
    assert path.read_text() == '# mine\nread_only = false\ntheme = "dracula"\n'
    assert load_settings(path) == (Settings(theme="dracula"), [])


async def test_the_filter_line_shows_what_is_typed_keeps_keys_typed_at_once_and_its_arrows_edit() -> None:
    """The focused one-line box drew no text (a focus border took its row), keys that arrived with
    `/` went to the table, and while paused the arrows scrolled the graphs instead of moving the cursor."""
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(
            *(snapshot(1_795_000_000.0 + second, gpus=(gpu(0), gpu(1)), processes=PROCESSES) for second in range(300))
        )
        await pilot.pause()
        table = app.query_one(ProcessTable)
        line = app.query_one(FilterInput)
        await pilot.press("p")  # paused: the arrows belong to the graphs, unless the filter line has focus
        assert app.paused
        for key, character in (("slash", "/"), ("e", "e"), ("v", "v"), ("a", "a"), ("l", "l")):
            app.post_message(events.Key(key, character))  # all queued before any is handled, as a fast typist's
        await pilot.pause()
        assert line.has_focus and line.value == "eval" and table.pids == [200]
        assert not table.all_processes  # `v` reached the line, not the table's "all processes"
        assert line.size.height == 1 and "eval" in widget_text(line)
        scrolled_before = app.query_one(GpuPane).scrolled_back
        await pilot.press("left", "left", "x")
        assert line.value == "evxal" and app.query_one(GpuPane).scrolled_back == scrolled_before
        await pilot.press("end", "backspace")
        assert line.value == "evxa"
        await pilot.press("escape")
        assert table.has_focus and table.filter_text == ""
        await pilot.press("left")  # the line closed: back to scrolling the paused graphs
        assert app.query_one(GpuPane).scrolled_back != scrolled_before
