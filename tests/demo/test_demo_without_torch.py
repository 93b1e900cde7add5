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
