"""Installing the hook: cheap import, patches put on after `import torch`, and taken off again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hook_helpers import REPO_ROOT

PROBE = r"""
import json, sys, time
started = time.perf_counter()
import gpumon.hook
import_ms = (time.perf_counter() - started) * 1e3
report = {"import_ms": import_ms, "torch_imported_by_hook": "torch" in sys.modules}
import torch
from torch.utils.data import dataloader
from torch.optim import optimizer
report["next_wrapped"] = hasattr(dataloader._BaseDataLoaderIter.__next__, "__wrapped__")
report["iter_wrapped"] = hasattr(dataloader.DataLoader.__iter__, "__wrapped__")
report["backward_wrapped"] = hasattr(torch.autograd.backward, "__wrapped__")
report["post_hooks"] = len(optimizer._global_optimizer_post_hooks)
report["cuda_initialized"] = torch.cuda.is_initialized()
report["installed"] = gpumon.hook.install() and gpumon.hook.is_installed()
gpumon.hook.install()  # idempotent
report["post_hooks_after_second_install"] = len(optimizer._global_optimizer_post_hooks)
gpumon.hook.uninstall()
report["unwrapped"] = not any(hasattr(f, "__wrapped__") for f in (
    dataloader._BaseDataLoaderIter.__next__, dataloader.DataLoader.__iter__, torch.autograd.backward))
report["post_hooks_after_uninstall"] = len(optimizer._global_optimizer_post_hooks)
print(json.dumps(report))
"""


def test_import_is_cheap_and_patches_follow_torch(sock_dir: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["torch_imported_by_hook"] is False
    assert report["next_wrapped"] and report["iter_wrapped"] and report["backward_wrapped"]
    assert report["post_hooks"] == 1 and report["post_hooks_after_second_install"] == 1
    assert report["cuda_initialized"] is False
    assert report["installed"] is True
    assert report["unwrapped"] and report["post_hooks_after_uninstall"] == 0
    assert os.listdir(sock_dir) == []  # uninstall stopped the server and removed its socket


TRAIN = r"""
import json, os
import gpumon.hook
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
wrapped = []
for step in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    wrapped.append(hasattr(torch.autograd.backward, "__wrapped__"))
from gpumon.hook.lifecycle import runtime as current_runtime
runtime = current_runtime()
print(json.dumps({"wrapped": wrapped, "steps": runtime.seq if runtime else None}))
"""


def test_backward_is_torchs_own_again_once_an_optimizer_marks_the_steps(sock_dir: str) -> None:
    """The backward wrapper has nothing left to do once optimizer steps mark the boundaries: the first backward after
    that hands torch its own function back; with NVTX ranges on, it stays."""
    for nvtx, expected in (("0", [True, False, False]), ("1", [True, True, True])):
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GPUMON_NVTX": nvtx}
        out = subprocess.run([sys.executable, "-c", TRAIN], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["wrapped"] == expected, nvtx
        assert report["steps"] == 3, "steps are still closed by the optimizer"


SERVES_NOWHERE = r"""
import gpumon.hook
import torch  # the server starts here, and cannot
import threading
from gpumon.hook.lifecycle import server
assert server() is None
assert not [t for t in threading.enumerate() if t.name.startswith("gpumon-hook")]  # no sampler left behind
"""


@pytest.mark.parametrize("problem", ["symlink", "cannot_create", "other_owner"])
def test_an_unusable_socket_dir_is_said_once_on_the_jobs_stderr(problem: str, tmp_path: Path) -> None:
    """A GPUMON_SOCKET_DIR the hook cannot serve in left the job unseen with nothing in its log."""
    directory = tmp_path / "s"
    if problem == "symlink":
        (tmp_path / "target").mkdir(mode=0o700)
        directory.symlink_to(tmp_path / "target")
    elif problem == "cannot_create":
        directory = tmp_path / "missing" / "s"
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a directory to another user")
        directory.mkdir(mode=0o700)
        os.chown(directory, 65534, 65534)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GPUMON_SOCKET_DIR": str(directory)}
    out = subprocess.run([sys.executable, "-c", SERVES_NOWHERE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("gpumon hook:")]
    assert len(said) == 1, out.stderr
    assert "not serving" in said[0] and "GPUMON_SOCKET_DIR" in said[0] and str(directory) in said[0]
