"""On a GPU: the hook's stack sampler reads the training stream's state right (busy under queued matmuls, idle while
the job's own CPU code runs), never syncs, and leaves a CUDA graph capture alone (the capture would fail if another
thread queried a stream during it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpumon.protocol import activity

REPO_ROOT = Path(__file__).resolve().parents[2]

JOB = r"""
import json, time
import gpumon.hook
import torch
from gpumon.hook import lifecycle

torch.cuda.set_device(0)
a = torch.randn(8192, 8192, device="cuda")
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)

def train_step(x):
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

def results():
    sampler = lifecycle.runtime().sampler
    return sampler.result() if sampler is not None else None

def gpu_bound(seconds):
    torch.cuda.set_sync_debug_mode("error")  # a sync from the hook's side would raise here... in the job
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(8):
            b = a @ a  # queued far ahead of the GPU
        train_step(torch.randn(16, 64, device="cuda"))
        while not torch.cuda.current_stream().query() and time.monotonic() < end:
            time.sleep(0.001)  # keep the queue from growing without bound, without a sync
    torch.cuda.set_sync_debug_mode("default")

def own_cpu_code(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        total = 0
        for i in range(200_000):  # the job's own Python, while the GPU has nothing to do
            total += i * i
        train_step(torch.randn(16, 64, device="cuda"))

train_step(torch.randn(16, 64, device="cuda"))
gpu_bound(4.0)
torch.cuda.synchronize()
after_busy = results()
own_cpu_code(4.0)
torch.cuda.synchronize()
after_cpu = results()
# A CUDA graph capture (default, global mode) while the sampler runs at 200 Hz.
static_x = torch.randn(16, 64, device="cuda")
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    for _ in range(3):
        model(static_x)
torch.cuda.current_stream().wait_stream(stream)
captured = []
for _ in range(20):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    graph.replay()
    captured.append(True)
    time.sleep(0.02)
torch.cuda.synchronize()
final = results()
state = lifecycle.runtime()
print(json.dumps({"busy": after_busy, "cpu": after_cpu, "final": final, "captures": len(captured),
                  "errors": state.errors, "last_error": state.last_error}), flush=True)
"""


def test_the_sampler_reads_busy_and_idle_and_spares_graph_captures(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GPUMON_HOOK_SAMPLE_HZ": "200",
        "GPUMON_SOCKET_DIR": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", JOB], env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["errors"] == 0, out["last_error"]
    assert out["captures"] == 20
    busy, cpu, final = out["busy"], out["cpu"], out["final"]
    assert busy is not None, "the sampler never started"

    def total(result: dict, kind: int) -> int:
        return sum(counts[kind] for counts in result["activities"].values())

    # Phase 1: the stream had matmuls queued nearly all the time.
    assert total(busy, 1) > 5 * max(1, total(busy, 0)), busy
    # Phase 2 (counts since phase 1): the job's own loop, with the GPU idle.
    cpu_idle = cpu["activities"][activity.CPU][0] - busy["activities"].get(activity.CPU, [0, 0, 0])[0]
    cpu_busy = cpu["activities"][activity.CPU][1] - busy["activities"].get(activity.CPU, [0, 0, 0])[1]
    assert cpu_idle > 200 and cpu_idle > 4 * cpu_busy, cpu
    assert any(line["function"] == "own_cpu_code" and line["activity"] == activity.CPU for line in cpu["lines"])
    # Phase 3: the first capture turned the stream queries off for good; the captures all succeeded.
    assert final["gpu_state"] is not None and "graph" in final["gpu_state"]
