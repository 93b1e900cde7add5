"""Textual's private API is used only on the Textual versions it was checked on, and pyproject.toml allows them."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from gpumon.tui import _textual_compat
from gpumon.tui.process_table import ProcessTable

REPOSITORY = Path(__file__).resolve().parents[2]


def _textual_requirement() -> Requirement:
    with open(REPOSITORY / "pyproject.toml", "rb") as file:
        dependencies = tomllib.load(file)["project"]["dependencies"]
    return next(Requirement(text) for text in dependencies if Requirement(text).name == "textual")


def test_the_workarounds_are_on_exactly_on_the_checked_versions() -> None:
    installed = version("textual")
    assert (installed in _textual_compat.CHECKED) == _textual_compat.ACTIVE
    table_class = "FastCellTable" if _textual_compat.ACTIVE else "PlainCellTable"
    assert ProcessTable.__mro__[1].__name__ == table_class


def test_pyproject_allows_a_range_holding_every_checked_version_and_the_installed_one() -> None:
    requirement = _textual_requirement()
    assert not str(requirement.specifier).startswith("=="), "a range, not a pin"
    for checked in _textual_compat.CHECKED:
        assert requirement.specifier.contains(checked), (checked, str(requirement.specifier))
    assert requirement.specifier.contains(version("textual"))


def test_the_private_modules_are_not_imported_outside_the_package() -> None:
    private = ("textual._", "textual.widgets._", "._styles_cache", "._row_locations", "._cell_render_cache")
    for path in (REPOSITORY / "gpumon").rglob("*.py"):
        if "_textual_compat" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for name in private:
            assert f"from {name}" not in text and f"import {name}" not in text, (path, name)
        assert "._cell_render_cache" not in text and "._row_locations" not in text, path


def test_textuals_version_is_read_from_its_dist_info_as_importlib_metadata_reads_it() -> None:
    assert _textual_compat.textual_version() == version("textual")


def test_without_one_dist_info_beside_it_textuals_version_comes_from_importlib_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import textual

    package = tmp_path / "textual"
    package.mkdir()
    monkeypatch.setattr(textual, "__file__", str(package / "__init__.py"))
    assert _textual_compat.textual_version() == version("textual"), "no dist-info there (an editable install)"
    (tmp_path / "textual-1.0.0.dist-info").mkdir()
    assert _textual_compat.textual_version() == "1.0.0"
    (tmp_path / "textual-2.0.0.dist-info").mkdir()
    assert _textual_compat.textual_version() == version("textual"), "two: neither is trusted"
