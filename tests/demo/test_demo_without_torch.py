"""`gpumon demo` where torch cannot be imported: one clear line and exit 2 before any trainer or dashboard starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
BLOCKER = textwrap.dedent("""
    import sys

    class BlockTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, BlockTorch())
""")


@pytest.mark.parametrize("args", [(), ("--guided",), ("--device", "cpu")])
def test_demo_without_torch_says_so_in_one_line_and_exits_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    check = subprocess.run(
        [sys.executable, "-c", "import torch"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        timeout=60,
    )
    assert check.returncode != 0 and "No module named 'torch'" in check.stderr, "the blocker blocks torch"
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "demo", *args],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPOSITORY}"},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "gpumon: error: the demo trainer needs PyTorch, which this Python cannot import; install it (CPU build: "
        "pip install torch --index-url https://download.pytorch.org/whl/cpu) and run gpumon demo again"
    ]
    assert result.stdout == ""


@pytest.mark.parametrize("args", [(), ("--guided",)])
def test_a_torch_that_fails_to_import_is_one_line_and_no_dashboard(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A torch that is there but raises on import (a shared library missing: OSError) passed the check that only
    looked for it, and the dashboard started on a trainer that could never run."""
    broken = tmp_path / "torch"
    broken.mkdir()
    (broken / "__init__.py").write_text(
        'raise OSError("libtorch_cpu.so: cannot open shared object file: No such file or directory")\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "demo", *args],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPOSITORY}", "TMPDIR": str(tmp_path)},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-500:]
    assert result.stderr.strip().splitlines() == [
        "gpumon: error: the demo trainer needs PyTorch, and importing it fails here (OSError: libtorch_cpu.so: "
        "cannot open shared object file: No such file or directory); reinstall it (CPU build: pip install torch "
        "--index-url https://download.pytorch.org/whl/cpu) and run gpumon demo again"
    ]
    assert result.stdout == ""
    assert not list(tmp_path.glob("gpumon-demo-*.log")), "no trainer was started"
