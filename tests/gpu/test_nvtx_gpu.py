"""On a GPU: GPUMON_NVTX=1 in a CUDA job under torch.cuda.set_sync_debug_mode("error") adds no sync, every step gets
its ranges from torch's real NVTX, the range depth stays bounded; under nsys (when installed) the report counts them.

The job wraps torch.cuda.nvtx.range_push/range_pop (calling the real ones) to count them and keep the depths they
return (negative without a profiler attached; nsys 2023.4 returns -1 too). nsys on a GPU machine without network:
scripts/nsys_bundle.sh packs it into .nsys/, to carry and unpack there (that nsys traces NVTX but not CUDA 13).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gpumon import protocol

REPO_ROOT = Path(__file__).resolve().parents[2]
RANGE_NAMES = ("step", "data wait", "forward", "backward", "optimizer")

NVTX_JOB = r"""
import json
import gpumon.hook
import torch
from torch.utils.data import DataLoader, TensorDataset

nvtx = torch.cuda.nvtx
real_push, real_pop = nvtx.range_push, nvtx.range_pop
depths, counts, pops = [], {}, [0]

def range_push(name):
    depth = real_push(name)
    depths.append(depth)
    counts[name] = counts.get(name, 0) + 1
    return depth

def range_pop():
    pops[0] += 1
    return real_pop()

nvtx.range_push, nvtx.range_pop = range_push, range_pop
torch.cuda.set_device(0)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
data = TensorDataset(torch.randn(100 * 16, 256), torch.randint(0, 10, (100 * 16,)))
loader = DataLoader(data, batch_size=16, pin_memory=True, num_workers=2, persistent_workers=True)
torch.cuda.set_sync_debug_mode("error")  # any synchronizing call from here on raises
steps = 0
for epoch in range(2):
    for x, y in loader:
        x = x.cuda(non_blocking=True)
        y = y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
torch.cuda.set_sync_debug_mode("default")
torch.cuda.synchronize()
runtime = gpumon.hook.lifecycle.runtime()
print(json.dumps({
    "steps": steps, "hook_steps": runtime.seq, "hook_errors": runtime.errors, "counts": counts,
    "pushes": len(depths), "pops": pops[0], "depths": sorted(set(depths)), "open": runtime.nvtx.depth,
}), flush=True)
"""


def run_job(tmp_path: Path, prefix: list[str]) -> dict[str, Any]:
    script = tmp_path / "job.py"
    script.write_text(NVTX_JOB)
    env = {
        **os.environ,
        protocol.NVTX_ENV: "1",
        protocol.SOCKET_DIR_ENV: tempfile.mkdtemp(prefix="gpumon-gpu-", dir="/tmp") + "/s",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [*prefix, sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gpumon hook" not in done.stderr, done.stderr[-3000:]
    summary: dict[str, Any] = next(json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"steps"'))
    assert summary["steps"] == summary["hook_steps"] == 200 and summary["hook_errors"] == 0
    assert summary["counts"] == {
        "step": 201,  # one per step, and the one the last optimizer step opened
        "data wait": 202,  # one per batch and each epoch's StopIteration
        "forward": 200,
        "backward": 200,
        "optimizer": 200,
    }
    assert summary["pushes"] - summary["pops"] == summary["open"] == 1  # the open step, closed at exit
    return summary


def test_nvtx_ranges_on_a_cuda_job_add_no_sync(tmp_path: Path) -> None:
    summary = run_job(tmp_path, [])
    assert max(summary["depths"]) <= 1  # negative without a profiler attached; never deeper than step > part


@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys (Nsight Systems) is not installed")
def test_nsys_shows_the_ranges(tmp_path: Path) -> None:
    report = tmp_path / "report"
    nsys = shutil.which("nsys") or "nsys"
    run_job(tmp_path, [nsys, "profile", "-t", "nvtx", "-o", str(report), "--force-overwrite", "true"])
    rep = str(report) + ".nsys-rep"
    for name in ("nvtx_sum", "nvtxsum"):  # the report's name in newer / older nsys
        stats = subprocess.run([nsys, "stats", "-r", name, "-f", "csv", rep], capture_output=True, text=True)
        if stats.returncode == 0 and "Range" in stats.stdout:
            break
    assert stats.returncode == 0, stats.stderr[-2000:]
    table = stats.stdout[stats.stdout.index("Time (%)") :]
    instances = {row["Range"].lstrip(":"): int(row["Instances"]) for row in csv.DictReader(io.StringIO(table))}
    assert set(instances) == set(RANGE_NAMES), stats.stdout[-3000:]
    assert instances["forward"] == instances["backward"] == instances["optimizer"] == 200
    assert instances["data wait"] == 202
    assert instances["step"] in (200, 201)  # the last step closes at exit, when nsys may have stopped recording
