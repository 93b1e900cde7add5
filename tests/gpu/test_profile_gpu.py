"""On a GPU: `gpumon profile` on a small CUDA job with pageable copies, the summary checked against the trace's own
events (recomputed here independently); on 2 GPUs, a DDP job whose all-reduce is not hidden named comm_bound by
`gpumon diagnose --pid --profile`.

tests/gpu/conftest.py skips these tests, saying why, on machines without a GPU.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpumon import protocol
from tests.job_process import nvml_uuids

REPO_ROOT = Path(__file__).resolve().parents[2]
GPUMON = [sys.executable, "-m", "gpumon"]
GPUMON_RUN = [*GPUMON, "run", "--no-tui", "--"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
BATCH, IMAGE_BYTES = 64, 3 * 224 * 224 * 4

PAGEABLE_JOB = rf"""
import gpumon.hook
import torch
from torch.utils.data import DataLoader, TensorDataset
images = torch.randn(4 * {BATCH}, 3, 224, 224)  # pageable host memory, {BATCH * IMAGE_BYTES} bytes a batch
labels = torch.randint(0, 10, (4 * {BATCH},))
loader = DataLoader(TensorDataset(images, labels), batch_size={BATCH}, pin_memory=False, drop_last=True)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 7, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(16, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
print("ready", flush=True)
while True:
    for x, y in loader:
        x, y = x.to("cuda"), y.to("cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

# Big gradients, almost no compute: the all-reduce of 4 x 64 MiB of gradients cannot hide behind backward.
DDP_COMM_JOB = r"""
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, bias=False) for _ in range(4)]).cuda()
model = DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(8, 4096, device="cuda")
while True:
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.fixture
def sock_dir() -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gpumon-gpu-profile-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


def env_for(sock_dir: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), **{protocol.SOCKET_DIR_ENV: sock_dir})


def wait_socket(path: str, proc: subprocess.Popen[Any], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, f"the job exited ({proc.returncode})"
        assert time.monotonic() < deadline, f"no socket {path}"
        time.sleep(0.2)


def trace_events(path: str) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as stream:
        trace = json.load(stream)
    events: list[dict[str, Any]] = trace["traceEvents"]
    return events


def union_us(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def test_profile_of_a_pageable_cuda_job_matches_the_trace(sock_dir: str, tmp_path: Path) -> None:
    job = subprocess.Popen([sys.executable, "-c", PAGEABLE_JOB], env=env_for(sock_dir), cwd=REPO_ROOT)
    try:
        wait_socket(os.path.join(sock_dir, f"{job.pid}.sock"), job)
        time.sleep(5)  # warm-up: cuDNN autotuning, the allocator
        done = subprocess.run(
            [sys.executable, "-m", "gpumon", "profile", str(job.pid), "--steps", "5", "--out", str(tmp_path), "--json"],
            capture_output=True,
            text=True,
            timeout=180,
            env=env_for(sock_dir),
            cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert job.poll() is None  # the job trains on after the capture
    finally:
        job.kill()
        job.wait()
    report = json.loads(done.stdout)
    result, summary = report["result"], report["summary"]
    assert result["available"] and result["cuda"] is True and result["steps"] == 5
    events = trace_events(result["path"])
    steps = [e for e in events if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("ProfilerStep#")]
    assert len(steps) == 5 == summary["steps"]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    assert kernels and summary["kernels"] == len(kernels)
    assert summary["kernel_ms"] == pytest.approx(sum(e["dur"] for e in kernels) / 1e3, abs=0.01)
    copies = [e for e in events if e.get("ph") == "X" and e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]]
    copied = sum(e["args"]["bytes"] for e in copies)
    pageable = sum(e["args"]["bytes"] for e in copies if "Pageable" in e["name"])
    assert summary["htod"]["bytes"] == copied and summary["htod"]["pageable_bytes"] == pageable
    assert copied >= 5 * BATCH * IMAGE_BYTES  # every step copied its batch of images
    assert summary["htod"]["pageable_share"] == pytest.approx(pageable / copied, abs=1e-3)
    assert summary["htod"]["pageable_share"] > 0.99  # pin_memory=False: the images come from pageable memory
    busy = sum(
        b - a
        for device in {e["args"]["device"] for e in kernels}
        for a, b in union_us(
            [
                (e["ts"], e["ts"] + e["dur"])
                for e in events
                if e.get("ph") == "X"
                and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and e["args"].get("device") == device
            ]
        )
    )
    assert summary["gpu_busy_ms"] == pytest.approx(busy / 1e3, abs=0.01)
    assert summary["nccl_kernels"] == 0


def test_ddp_all_reduce_not_hidden_is_comm_bound(sock_dir: str, tmp_path: Path) -> None:
    if len(nvml_uuids()) < 2:
        pytest.skip("comm_bound needs 2 GPUs (nvidia-h200-x2): NCCL between ranks")
    script = tmp_path / "ddp_comm.py"
    script.write_text(DDP_COMM_JOB)
    env = dict(env_for(sock_dir), XDG_CACHE_HOME=str(tmp_path / "cache"))
    launcher = subprocess.Popen(
        [*GPUMON_RUN, *TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script)],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        from gpumon.jobs.discovery import scan

        os.environ[protocol.SOCKET_DIR_ENV] = sock_dir
        deadline = time.monotonic() + 180
        ranks: list[Any] = []
        while time.monotonic() < deadline and not ranks:
            ranks = [group for group in scan().groups if len(group.jobs) == 2]
            time.sleep(0.5)
        assert ranks, "no DDP group of 2 ranks appeared"
        rank0 = next(info.pid for info in ranks[0].jobs if info.rank == 0)
        time.sleep(5)
        done = subprocess.run(
            [*GPUMON, "diagnose", "--pid", str(rank0), "--duration", "10", "--profile", "10", "--json"],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=REPO_ROOT,
        )
    finally:
        os.environ.pop(protocol.SOCKET_DIR_ENV, None)
        os.killpg(launcher.pid, signal.SIGINT)
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    capture = report["capture"]["summary"]
    assert capture["nccl_kernels"] > 0 and capture["steps"] == 10
    events = trace_events(report["capture"]["result"]["path"])
    nccl = union_us(
        [
            (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e.get("ph") == "X" and e.get("cat") == "kernel" and "nccl" in e["name"].lower()
        ]
    )
    assert capture["nccl_ms"] == pytest.approx(sum(b - a for a, b in nccl) / 1e3, abs=0.01)
    finding = report["finding"]
    found = {f["category"]: f for f in (finding, *finding.get("secondary", []))}
    assert "comm_bound" in found, finding
    assert "NCCL exposed" in found["comm_bound"]["evidence"]
    assert found["comm_bound"]["numbers"]["comm_exposed_share"] >= 0.15
