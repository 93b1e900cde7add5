"""On a GPU: a matmul-only bf16 job of known FLOPs under the hook. The FLOPs the hook counts on its sampled step
match the analytic count, the MFU against the spec-sheet dense peak lies in (0, 1), and the joules per sample from
NVML's energy counter (through the sampler, as the job pane reads it) are positive.

tests/gpu/conftest.py skips these tests, saying why, on machines without a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpumon import protocol
from gpumon.advisor.efficiency import SOURCE_COUNTER, EnergyLog, job_mfu, view_joules_per_sample
from gpumon.advisor.peak_flops import BF16, gpu_peaks
from gpumon.jobs.client import JobClient
from gpumon.sampling.sampler import Sampler

REPO_ROOT = Path(__file__).resolve().parents[2]
LAYERS, WIDTH, BATCH = 8, 4096, 8192

MATMUL_JOB = rf"""
import torch
import gpumon.hook
layers = torch.nn.Sequential(*[torch.nn.Linear({WIDTH}, {WIDTH}, bias=False) for _ in range({LAYERS})]).cuda()
optimizer = torch.optim.SGD(layers.parameters(), lr=1e-6)
x = torch.randn({BATCH}, {WIDTH}, device="cuda")
while True:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = layers(x).float().square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    gpumon.hook.step({BATCH})
"""


def analytic_flops() -> int:
    """2*m*n*k per matmul: each layer forward, its weight grad and its input grad (not the first layer's: x needs
    no grad)."""
    matmul = 2 * BATCH * WIDTH * WIDTH
    return LAYERS * 3 * matmul - matmul


def test_a_known_matmul_job_has_its_flops_mfu_and_energy_per_sample() -> None:
    sock_dir = os.path.join(tempfile.mkdtemp(prefix="gpumon-mfu-", dir="/tmp"), "s")
    env = {**os.environ, protocol.SOCKET_DIR_ENV: sock_dir, "PYTHONPATH": str(REPO_ROOT)}
    job = subprocess.Popen([sys.executable, "-c", MATMUL_JOB], env=env, cwd=REPO_ROOT)
    energy = EnergyLog()
    sampler = Sampler(interval=0.5)
    sampler.start(energy.add)
    client = JobClient(os.path.join(sock_dir, f"{job.pid}.sock"), wait_for_socket=True)
    try:
        client.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            flops = (client.view().state or {}).get("flops")
            if flops is not None:
                break
            assert job.poll() is None, "the job exited"
            time.sleep(0.5)
        assert flops is not None, "no FLOP count within 120 s"
        assert flops["available"], flops
        assert abs(flops["flops_per_step"] - analytic_flops()) <= 0.05 * analytic_flops(), flops
        assert flops["samples"] == BATCH
        time.sleep(35)  # several of the energy counter's 10 s readings
        view = client.view()
        name = next(d["name"] for d in view.cuda["devices"] if d["index"] == view.cuda["device"])
        reading = job_mfu(view)
        print(f"{name}: {reading}")
        if gpu_peaks(name) is not None:
            assert reading.precision == BF16 and reading.value is not None
            assert 0.0 < reading.value < 1.0, reading
        power = energy.power(energy.gpus_of(job.pid) or view.device_uuids)
        joules = view_joules_per_sample(view, power)
        print(f"power {power}, {joules} J/sample")
        assert power is not None and power.source == SOURCE_COUNTER and power.watts > 50
        assert joules is not None and joules > 0
    finally:
        client.stop()
        sampler.stop()
        job.kill()
        job.wait()
