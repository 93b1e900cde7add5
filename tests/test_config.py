"""The config file: typed settings, one line per bad value and one for all unknown keys, and saving one key without
clobbering."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import tomllib

from gpumon.config import GRAPH_STYLES, SORT_KEYS, Settings, config_path, load_settings, save_setting
from gpumon.tui.graph import GraphStyle
from gpumon.tui.process_table import SORT_COLUMNS


def test_the_path_follows_xdg_config_home_and_falls_back_to_dot_config() -> None:
    assert config_path({"XDG_CONFIG_HOME": "/x/cfg", "HOME": "/home/u"}) == Path("/x/cfg/gpumon/config.toml")
    assert config_path({"HOME": "/home/u"}) == Path("/home/u/.config/gpumon/config.toml")
    assert config_path({"XDG_CONFIG_HOME": "relative", "HOME": "/home/u"}) == Path("/home/u/.config/gpumon/config.toml")


def test_no_file_is_every_default_and_no_warning(tmp_path: Path) -> None:
    assert load_settings(tmp_path / "absent.toml") == (Settings(), [])


def test_every_setting_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        'interval = 0.5\ntheme = "nord"\ngraph_style = "blocks"\nhidden_panes = ["disk", "cpu"]\n'
        'read_only = true\ndefault_sort = "cpu_percent"\nhost_graphs = true\n'
    )
    settings, warnings = load_settings(path)
    assert warnings == []
    assert settings == Settings(
        interval=0.5,
        theme="nord",
        graph_style="blocks",
        hidden_panes=("disk", "cpu"),
        read_only=True,
        default_sort="cpu_percent",
        host_graphs=True,
    )


def test_unknown_keys_and_bad_values_are_one_line_each_naming_the_key_and_keep_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        'interval = 99\ncolour = "red"\nread_only = "yes"\ngraph_style = "dots"\ntheme = "nord"\n'
        'hidden_panes = ["gpu", "clock"]\ndefault_sort = 3\nhost_graphs = 1\n'
    )
    settings, warnings = load_settings(path)
    assert settings == Settings(theme="nord", read_only=True)  # a bad read_only is read as the safe side
    assert len(warnings) == 7
    keys = ["interval", "colour", "read_only", "graph_style", "hidden_panes", "default_sort", "host_graphs"]
    for key, line in zip(keys, warnings, strict=True):
        assert key in line and "\n" not in line
    assert "unknown key 'colour'" in warnings[1]


def test_thousands_of_unknown_keys_are_one_line_naming_the_first_few_and_their_count(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    unknown = "".join(f"key{index} = {index}\n" for index in range(5000))
    path.write_text(f'theme = "nord"\n{unknown}interval = 99\n')
    settings, warnings = load_settings(path)
    assert settings == Settings(theme="nord")
    assert len(warnings) == 2, warnings[:3]
    assert "5000 unknown keys ignored: 'key0', 'key1', 'key2', 'key3', 'key4', ... (known: interval," in warnings[0]
    assert "interval = 99 is not" in warnings[1], "a bad value keeps its own line, after"
    assert all("\n" not in line and len(line) < 400 for line in warnings)


def test_the_dashboard_with_thousands_of_unknown_keys_says_one_line_and_starts(tmp_path: Path) -> None:
    """The dashboard (here drawing a screenshot of a recording) showed each warning as a notification: 5,000 unknown
    keys took over a minute and 5,000 lines."""
    config = tmp_path / "gpumon" / "config.toml"
    config.parent.mkdir()
    config.write_text("".join(f"key{index} = {index}\n" for index in range(5000)))
    recording = Path(__file__).resolve().parents[1] / "assets" / "recordings" / "h100-demo-slow.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "replay", str(recording), "--screenshot", str(tmp_path / "shot.svg")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stderr.count("\n") == 1 and "5000 unknown keys ignored" in result.stderr


def test_a_file_that_does_not_parse_is_one_line_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("interval = = 1\n")
    settings, warnings = load_settings(path)
    assert settings == Settings()
    assert len(warnings) == 1 and str(path) in warnings[0] and "\n" not in warnings[0]
    path.write_bytes(b'theme = "\xff"\n')
    assert load_settings(path)[0] == Settings()


def test_a_directory_in_place_of_the_file_is_one_line(tmp_path: Path) -> None:
    settings, warnings = load_settings(tmp_path)
    assert settings == Settings() and len(warnings) == 1 and "cannot read" in warnings[0]


def test_saving_the_theme_keeps_comments_unknown_keys_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    original = '# my settings\ninterval = 2.0  # slow box\ntheme = "nord"\nfuture_key = 1\n\n[plugins]\ntheme = "x"\n'
    path.write_text(original)
    assert save_setting("theme", "dracula", path) is None
    text = path.read_text()
    assert text == original.replace('theme = "nord"', 'theme = "dracula"')
    assert tomllib.loads(text)["plugins"] == {"theme": "x"}


def test_saving_adds_the_key_before_the_first_table_or_creates_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("read_only = true\n[plugins]\na = 1\n")
    assert save_setting("theme", 'we"ird\\', path) is None
    data = tomllib.loads(path.read_text())
    assert data == {"read_only": True, "theme": 'we"ird\\', "plugins": {"a": 1}}
    fresh = tmp_path / "new" / "gpumon" / "config.toml"
    assert save_setting("hidden_panes", ("disk",), fresh) is None
    assert load_settings(fresh) == (Settings(hidden_panes=("disk",)), [])


def test_a_file_that_cannot_be_edited_line_by_line_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    tricky = 'note = """\ntheme = "inside a string"\n"""\n'
    path.write_text(tricky)
    error = save_setting("theme", "nord", path)
    assert error is not None and "\n" not in error
    assert path.read_text() == tricky
    path.write_text("broken = = 1\n")
    assert save_setting("theme", "nord", path) is not None
    assert path.read_text() == "broken = = 1\n"


def test_the_choices_match_the_dashboards() -> None:
    assert tuple(SORT_COLUMNS) == SORT_KEYS
    # ASCII is not picked in the config: --ascii (or the terminal) makes every graph, sparkline and bar ASCII.
    assert tuple(style.value for style in GraphStyle if style is not GraphStyle.ASCII) == GRAPH_STYLES


def test_a_config_nested_too_deeply_for_the_parser_is_one_line_and_defaults(tmp_path: Path) -> None:
    """100k nested `[` raised RecursionError out of tomllib (a traceback at start)."""
    path = tmp_path / "config.toml"
    path.write_text("theme = " + "[" * 100_000 + "\n")
    settings, warnings = load_settings(path)
    assert settings == Settings()
    assert len(warnings) == 1 and "nested too deeply" in warnings[0] and "\n" not in warnings[0]
    assert save_setting("theme", "nord", path) is not None
    assert path.read_text().startswith("theme = [[[")


def test_a_fifo_in_place_of_the_file_never_blocks(tmp_path: Path) -> None:
    """A FIFO at the config's path blocked the start forever, waiting for a writer."""
    path = tmp_path / "config.toml"
    os.mkfifo(path)
    done: list[tuple[Settings, list[str]]] = []
    reader = threading.Thread(target=lambda: done.append(load_settings(path)), daemon=True)
    reader.start()
    reader.join(10)
    assert done, "load_settings blocked on a FIFO"
    settings, warnings = done[0]
    assert settings == Settings() and len(warnings) == 1 and "not a regular file" in warnings[0]
    saved: list[str | None] = []
    saver = threading.Thread(target=lambda: saved.append(save_setting("theme", "nord", path)), daemon=True)
    saver.start()
    saver.join(10)
    assert saved and saved[0] is not None and "not a regular file" in saved[0]


def test_booleans_are_strict_and_a_bad_read_only_is_read_only_with_a_warning(tmp_path: Path) -> None:
    """`read_only = "yes"` read as false (process control on) without the user noticing."""
    path = tmp_path / "config.toml"
    for bad in ('"yes"', '"true"', "1", "0", '"no"', "[]"):
        path.write_text(f"read_only = {bad}\nhost_graphs = {bad}\n")
        settings, warnings = load_settings(path)
        assert settings.read_only is True and settings.host_graphs is Settings().host_graphs  # the default
        assert len(warnings) == 2
        assert (
            "read_only" in warnings[0] and "is not true or false" in warnings[0] and "read_only = true" in warnings[0]
        )
        assert "host_graphs" in warnings[1] and "the default is used" in warnings[1]
    path.write_text("read_only = false\nhost_graphs = false\n")
    assert load_settings(path) == (Settings(read_only=False, host_graphs=False), [])
