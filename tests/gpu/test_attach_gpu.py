"""On a GPU: what the attach layer shows of a CUDA job. A hooked job's step breakdown has a GPU share, torch memory
and the UUID of its GPU as NVML names it (so the dashboard marks the right GPU); py-spy puts a job that blocks in
`.item()` / `torch.cuda.synchronize()` in the CUDA sync category.

Jobs run in subprocesses; tests/gpu/conftest.py skips these tests, saying why, on machines without a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon import protocol
from gpumon.jobs.client import JobClient
from gpumon.jobs.discovery import AttachError
from gpumon.jobs.pyspy.categories import CUDA_SYNC
from gpumon.jobs.pyspy.sampler import PySpySampler
from gpumon.jobs.pyspy.target import find_pyspy, probe
from tests.job_process import nvml_uuids

REPO_ROOT = Path(__file__).resolve().parents[2]

CUDA_JOB = r"""
import json, os, sys, time
if sys.argv[1] == "hook":
    import gpumon.hook
import torch
torch.cuda.set_device(0)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4096, 2048, device="cuda")
print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if sys.argv[2] == "item":
        loss.item()
    elif sys.argv[2] == "synchronize":
        torch.cuda.synchronize()
"""


@pytest.fixture
def sock_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gpumon-gpu-attach-", dir="/tmp")
    directory = os.path.join(base, "s")
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


def start(sock_dir: str, hook: str, sync: str) -> subprocess.Popen[str]:
    """The job runs from a file, as users' scripts do: py-spy's source-line rule reads the `.item()` line there."""
    script = Path(sock_dir).parent / "cuda_job.py"
    script.write_text(CUDA_JOB)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **{protocol.SOCKET_DIR_ENV: sock_dir})
    proc = subprocess.Popen([sys.executable, str(script), hook, sync], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline())["event"] == "ready"
    return proc


def test_a_hooked_cuda_job_shows_its_gpu_share_memory_and_gpu(sock_dir: str) -> None:
    job = start(sock_dir, "hook", "none")
    try:
        client = JobClient(job.pid, wait_for_socket=True)
        client.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            view = client.view()
            if view.stats.steps > 20 and view.stats.gpu_ms is not None and view.memory is not None:
                break
            time.sleep(0.2)
        client.stop()
    finally:
        job.kill()
        job.wait()
    view = client.view()
    assert view.stats.gpu_ms is not None and view.stats.gpu_ms > 0
    breakdown = view.stats.breakdown
    assert breakdown.gpu is not None and breakdown.gpu > 0.3, breakdown  # 8 big matmuls: mostly GPU time
    assert view.memory is not None and view.memory["allocated"] > 8 * 2048 * 2048 * 4
    assert view.device_uuids and view.device_uuids[0] in nvml_uuids()


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")
@pytest.mark.parametrize("sync", ["item", "synchronize"])
def test_py_spy_sees_a_job_blocked_on_the_gpu_as_cuda_sync(sock_dir: str, sync: str) -> None:
    job = start(sock_dir, "nohook", sync)
    try:
        try:
            probe(job.pid)
        except AttachError as error:
            pytest.skip(f"py-spy cannot attach here: {error}")
        sampler = PySpySampler(job.pid)
        sampler.start()
        deadline = time.monotonic() + 30
        while sampler.view().rounds < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        sampler.stop()
    finally:
        job.kill()
        job.wait()
    view = sampler.view()
    assert view.samples > 50
    assert view.dominant == CUDA_SYNC, view.counts
