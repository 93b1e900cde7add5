"""A real torchrun job of 2 ranks under `gpumon run`: both ranks found and grouped, the straggler named (and by the
advisor, with its own budget).

Gloo on the CPU everywhere; NCCL too where 2 GPUs are visible, each rank then on its own GPU. Rank 1 waits 30 ms for
each batch, so the ranks step in lockstep (DDP's all-reduce) and rank 1 is the one the others wait for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpumon.advisor.categories import STRAGGLER
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import build_signals
from gpumon.jobs.discovery import scan
from gpumon.jobs.session import AttachedJob
from tests.job_process import nvml_uuids

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER_GRACE_S = 60
"""How long Ctrl+C may take to stop the job: longer than torchrun's own 30 s before it SIGKILLs its ranks."""

DDP_JOB = r"""
import os, sys, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

backend = sys.argv[1]
dist.init_process_group(backend)
rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
if device.type == "cuda":
    torch.cuda.set_device(device)


class Batches(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        if rank == 1:
            time.sleep(0.03)
        return torch.randn(128), torch.randn(128)


model = torch.nn.Linear(128, 128).to(device)
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Batches(), batch_size=1):
    x, y = x.to(device), y.to(device)
    loss = (model(x) - y).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available() or torch.cuda.device_count() < 2,
            reason="NCCL ranks need 2 GPUs (run on nvidia-h200-x2)",
        ),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_torchrun_ranks_are_grouped_and_the_slow_rank_is_the_straggler(
    sock_dir: str, tmp_path: Path, backend: str
) -> None:
    script = tmp_path / "ddp_job.py"
    script.write_text(DDP_JOB)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "gpumon",
        "run",
        "--no-tui",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        backend,
    ]
    launcher = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    job = None
    try:
        deadline = time.monotonic() + 90
        groups = []
        while time.monotonic() < deadline and launcher.poll() is None:
            groups = [group for group in scan().groups if len(group.jobs) == 2]
            if groups:
                break
            time.sleep(0.5)
        assert groups, f"no group of 2 ranks appeared (launcher exit status: {launcher.poll()})"
        (group,) = groups
        assert group.label.startswith("torchrun run ") and ": ranks 0,1 of 2 " in group.label, group.label
        rank_pids = {job_info.rank: job_info.pid for job_info in group.jobs}

        job = AttachedJob.for_group(group)
        job.start()
        view = job.view()
        while time.monotonic() < deadline:
            view = job.view()
            if (
                len(view.ranks) == 2
                and all((rank.steps_per_s or 0) > 0 for rank in view.ranks)
                and view.stats.steps >= 40
            ):
                break
            time.sleep(0.5)
        assert [rank.rank for rank in view.ranks] == [0, 1], view.ranks
        walls = [rank.wall_ms for rank in view.ranks]
        assert all(wall is not None and wall >= 25 for wall in walls), walls  # lockstep: both wait on rank 1's data
        by_rank = {rank.rank: rank for rank in view.ranks}
        assert (by_rank[1].data_ms or 0) > 25 > (by_rank[0].data_ms or 0), view.ranks
        assert view.straggler == rank_pids[1], (view.straggler, rank_pids, view.ranks)
        # The advisor names it too, with its own budget: the others wait for its data inside their all-reduce.
        finding = diagnose(build_signals([], view))
        found = {f.category: f for f in (finding, *finding.secondary)}
        assert STRAGGLER in found, finding
        straggler = found[STRAGGLER]
        assert straggler.numbers["straggler_rank"] == 1 and straggler.numbers["straggler_pid"] == rank_pids[1]
        assert straggler.evidence.startswith(f"rank 1 (pid {rank_pids[1]}) waits for data"), straggler.evidence
        assert "its step: data" in straggler.evidence and straggler.severity > 0.3, straggler

        if backend == "nccl":
            uuids = nvml_uuids()
            devices = {client.pid: client.view().device_uuids for client in job.clients}
            assert devices[rank_pids[0]] == [uuids[0]] and devices[rank_pids[1]] == [uuids[1]], devices
    finally:
        if job is not None:
            job.stop()
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGINT)
            try:
                launcher.wait(LAUNCHER_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()
    # torchrun starts each rank in a session of its own and stops them itself (SIGTERM, then SIGKILL after 30 s).
    deadline = time.monotonic() + 15
    while [pid for pid in rank_pids.values() if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in rank_pids.values() if alive(pid)], "a rank outlived the launcher"


def alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
