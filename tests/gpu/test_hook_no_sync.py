"""On a GPU: the hook adds no host-device synchronization, times steps with CUDA events, counts a job's
syncs in a diagnosis window, and never initializes CUDA in a job that does not use it.

Each job runs in a subprocess (the hook patches torch process-wide); tests/gpu/conftest.py skips
these tests, saying why, on machines without a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpumon import protocol
from gpumon.jobs.connection import HookConnection

REPO_ROOT = Path(__file__).resolve().parents[2]

STRICT_JOB = r"""
import json, os, sys, time
import gpumon.hook
import torch
from torch.utils.data import DataLoader, TensorDataset

def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)

torch.cuda.set_device(0)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
data = TensorDataset(torch.randn(200 * 16, 256), torch.randint(0, 10, (200 * 16,)))
loader = DataLoader(data, batch_size=16, pin_memory=True, num_workers=2, persistent_workers=True)
print(json.dumps({"event": "ready"}), flush=True)
wait_for(sys.argv[1])
torch.cuda.set_sync_debug_mode("error")  # any synchronizing call from here on raises
steps = 0
for x, y in loader:
    x = x.cuda(non_blocking=True)
    y = y.cuda(non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    steps += 1
    time.sleep(0.01)  # a loop of ~2 s, so the client reads several states while it runs
torch.cuda.set_sync_debug_mode("default")
torch.cuda.synchronize()
print(json.dumps({"event": "done", "steps": steps}), flush=True)
wait_for(sys.argv[2])
"""

SYNCING_JOB = r"""
import json, os, sys, time
import gpumon.hook
import torch

def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.01)

model = torch.nn.Linear(64, 64).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64, device="cuda")
print(json.dumps({"event": "ready"}), flush=True)
wait_for(sys.argv[1])
losses = []
for step in range(40):
    loss = model(x).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())  # SYNC-LINE: one host-device sync per step
    time.sleep(0.01)
print(json.dumps({"event": "done", "mode_after": torch.cuda.get_sync_debug_mode()}), flush=True)
wait_for(sys.argv[2])
"""

CPU_JOB = r"""
import json, os, sys, time
import gpumon.hook
import torch
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(20):
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
print(json.dumps({"event": "ready"}), flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
print(json.dumps({"event": "done", "cuda_initialized": torch.cuda.is_initialized()}), flush=True)
"""


class GpuJob:
    def __init__(self, source: str, tmp: Path, env: dict[str, str] | None = None) -> None:
        script = tmp / "job.py"
        script.write_text(source)
        self.go = tmp / "go"
        self.release = tmp / "release"
        self.sock_dir = tempfile.mkdtemp(prefix="gpumon-gpu-", dir="/tmp") + "/s"
        env = {
            **os.environ,
            protocol.SOCKET_DIR_ENV: self.sock_dir,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(self.go), str(self.release)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.socket_path = os.path.join(self.sock_dir, f"{self.proc.pid}.sock")

    def event(self, name: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                if event["event"] == name:
                    return event
        raise AssertionError(f"job ended before {name!r}: rc={self.proc.wait()} stderr={self.proc.stderr.read()}")

    def connect(self) -> HookConnection:
        deadline = time.monotonic() + 60
        while not os.path.exists(self.socket_path):
            assert time.monotonic() < deadline, "no hook socket"
            assert self.proc.poll() is None, self.proc.stderr.read() if self.proc.stderr else ""
            time.sleep(0.02)
        return HookConnection(self.socket_path)

    def finish(self) -> None:
        self.release.touch()
        rc = self.proc.wait(60)
        assert rc == 0, self.proc.stderr.read() if self.proc.stderr else ""
        assert not os.path.exists(self.socket_path)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _records(conn: HookConnection, last_seq: int) -> dict[int, dict[str, Any]]:
    conn.send({"type": "subscribe", "backlog": protocol.BACKLOG_MAX, "steps_interval": 0.05})
    records: dict[int, dict[str, Any]] = {}
    deadline = time.monotonic() + 10
    while len(records) < last_seq and time.monotonic() < deadline:
        msg = conn.recv(0.5)
        if msg is not None and msg["type"] == "steps":
            records.update((r["seq"], r) for r in msg["records"])
    return records


def test_hook_adds_no_sync_and_times_steps_on_the_gpu(tmp_path: Path) -> None:
    # Every step timed with events (the default samples fast steps): the strictest case for syncs.
    job = GpuJob(STRICT_JOB, tmp_path, env={protocol.GPU_TIMING_ENV: "1"})
    try:
        job.event("ready")
        with job.connect() as conn:
            conn.send({"type": "subscribe", "state_interval": 0.25, "steps_interval": 0.05})
            job.go.touch()
            # The job itself is in sync debug mode "error": a diagnosis must refuse to touch it.
            started = conn.request({"type": "diagnose", "id": 1, "steps": 5}, ("diagnosing",))
            assert started["type"] == "diagnosing"
            states, diagnosis = [], None
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (diagnosis is None or len(states) < 3):
                msg = conn.recv(0.5)
                if msg is None:
                    continue
                if msg["type"] == "state":
                    states.append(msg)
                elif msg["type"] == "diagnosis":
                    diagnosis = msg
            done = job.event("done")
            state = conn.request({"type": "get_state", "id": 2}, ("state",))
            records = _records(conn, state["last_seq"])
            hello_devices = state["cuda"]["devices"]
        assert done["steps"] == 200 and state["last_seq"] == 200
        assert diagnosis is not None and diagnosis["available"] is False
        assert "sync debug mode itself" in diagnosis["reason"]
        assert any(s["memory"] and s["memory"]["allocated"] > 0 for s in states), "memory read during the loop"
        memory = state["memory"]
        assert memory["device"] == 0 and memory["reserved"] >= memory["allocated"] > 0
        assert memory["max_allocated"] >= memory["allocated"] and memory["ooms"] == 0
        assert state["precision"]["autocast"]["dtype"] == "torch.bfloat16"
        assert state["dataloaders"][0]["pin_memory"] is True and len(state["dataloaders"][0]["worker_pids"]) == 2
        assert hello_devices and hello_devices[0]["uuid"].startswith("GPU-")
        timed = [r for r in records.values() if r["gpu_ms"] is not None]
        assert len(timed) >= 150, f"only {len(timed)} of {len(records)} steps have GPU time"
        assert all(0 < r["gpu_ms"] <= r["wall_ms"] * 50 for r in timed)
        job.finish()
    finally:
        job.kill()


def test_diagnosis_counts_the_jobs_syncs(tmp_path: Path) -> None:
    job = GpuJob(SYNCING_JOB, tmp_path)
    try:
        job.event("ready")
        with job.connect() as conn:
            job.go.touch()
            time.sleep(0.1)
            assert conn.request({"type": "diagnose", "id": "d", "steps": 5}, ("diagnosing",))["type"] == "diagnosing"
            diagnosis = None
            deadline = time.monotonic() + 60
            while diagnosis is None and time.monotonic() < deadline:
                msg = conn.recv(0.5)
                if msg is not None and msg["type"] == "diagnosis":
                    diagnosis = msg
            done = job.event("done")
        assert diagnosis is not None and diagnosis["available"] is True, diagnosis
        assert diagnosis["steps"] == 5 and all(n >= 1 for n in diagnosis["syncs_per_step"])
        sync_line = (
            SYNCING_JOB.splitlines().index(next(line for line in SYNCING_JOB.splitlines() if "SYNC-LINE" in line)) + 1
        )
        assert any(site["file"].endswith("job.py") and site["line"] == sync_line for site in diagnosis["sites"])
        assert done["mode_after"] == 0  # the window put the job's mode back
        job.finish()
    finally:
        job.kill()


def test_the_hook_never_initializes_cuda_itself(tmp_path: Path) -> None:
    job = GpuJob(CPU_JOB, tmp_path)
    try:
        job.event("ready")
        with job.connect() as conn:
            assert conn.hello["cuda"]["initialized"] is False
            state = conn.request({"type": "get_state", "id": 1}, ("state",))
            assert state["memory"] is None and state["last_seq"] == 20
        job.release.touch()
        assert job.event("done")["cuda_initialized"] is False
        assert job.proc.wait(30) == 0
    finally:
        job.kill()
