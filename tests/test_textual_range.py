"""A Textual outside gpumon's range is one line naming the range and how to install gpumon beside it, and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from gpumon.cli import textual_range

REPO_ROOT = Path(__file__).resolve().parents[1]
RECORDING = REPO_ROOT / "tests" / "fixtures" / "gpus4.jsonl"


def _fake_textual(site: Path, version: str) -> None:
    """A Textual of `version` that breaks as textual 0.86.3 did under gpumon, were it imported."""
    (site / "textual").mkdir(parents=True)
    (site / "textual" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'textual.markup'\")\n")
    (site / f"textual-{version}.dist-info").mkdir()
    (site / f"textual-{version}.dist-info" / "METADATA").write_text(f"Name: textual\nVersion: {version}\n")


def _gpumon_with_textual_at(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=60, env=env, cwd=site
    )


def _pyprojects_textual() -> Requirement:
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return next(Requirement(text) for text in dependencies if Requirement(text).name == "textual")


def test_the_range_is_pyprojects() -> None:
    requirement = _pyprojects_textual()
    assert Requirement(textual_range.REQUIREMENT).specifier == requirement.specifier
    for version in ["0.43.0", "0.86.3", "7.9.9", "8.0.0", "8.0.1", "8.2.8", "8.2.99", "8.3.0", "8.3.0a1", "9.0.0"]:
        assert textual_range.in_range(version) == requirement.specifier.contains(version, prereleases=True), version


@pytest.mark.parametrize("version", ["0.86.3", "0.43.0", "8.3.0", "9.0.1"])
def test_a_textual_outside_the_range_is_one_line_and_exit_2(tmp_path: Path, version: str) -> None:
    _fake_textual(tmp_path, version)
    done = _gpumon_with_textual_at(tmp_path, "replay", str(RECORDING), "--screenshot", str(tmp_path / "s.svg"))
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert textual_range.REQUIREMENT in lines[0] and f"textual {version}" in lines[0]
    assert "pipx install" in lines[0] and "venv" in lines[0]
    assert not (tmp_path / "s.svg").exists()


def test_no_textual_at_all_is_said_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(textual_range.importlib.util, "find_spec", lambda name: None)
    problem = textual_range.textual_problem()
    assert problem is not None and "not installed" in problem and textual_range.REQUIREMENT in problem
