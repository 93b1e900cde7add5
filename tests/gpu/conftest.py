"""Skips every test under tests/gpu/ (saying why) unless this machine has nvidia-smi, NVML, a GPU and CUDA torch."""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """Why GPU tests cannot run here, or None when they can."""
    if shutil.which("nvidia-smi") is None:
        return "GPU tests need an NVIDIA GPU machine: nvidia-smi not found"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:  # noqa: BLE001 - any NVML failure means: skip, and say why
        return f"GPU tests need working NVML: {error}"
    if count == 0:
        return "GPU tests need an NVIDIA GPU: NVML found none"
    if importlib.util.find_spec("torch") is None:
        return "GPU tests need torch with CUDA: torch is not installed"
    # In a child process, so this test process holds no CUDA context of its own.
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    words = probe.stdout.split()
    if probe.returncode != 0 or len(words) != 2:
        return f"GPU tests need torch with CUDA: importing torch failed ({probe.stderr.strip()[-200:]})"
    if words[1] != "True":
        return f"GPU tests need torch with CUDA: torch {words[0]} sees no CUDA device"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = [item for item in items if HERE in Path(item.path).parents]
    if not here:
        return
    reason = gpu_unavailable_reason()
    if reason is not None:
        for item in here:
            item.add_marker(pytest.mark.skip(reason=reason))
