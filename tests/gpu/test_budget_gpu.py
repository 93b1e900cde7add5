"""On a GPU: jobs shaped like failures seen on real jobs, diagnosed end to end (`gpumon diagnose --json -- CMD`, and
`--pid` with py-spy for a job without the hook). Small shapes: each job is watched for 12 s after a 3 s warm-up.

tests/gpu/conftest.py skips these tests, saying why, on machines without a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

PAGEABLE_JOB = r"""
import torch
from torch.utils.data import DataLoader, TensorDataset
images = torch.randn(1024, 3, 224, 224)  # 154 MB per batch of 256, fp32, pageable
labels = torch.randint(0, 10, (1024,))
loader = DataLoader(TensorDataset(images, labels), batch_size=256, shuffle=True, pin_memory=False, num_workers=0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 7, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(8, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    for x, y in loader:
        x, y = x.to("cuda"), y.to("cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

ITEM_JOB = r"""
import torch
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(13)], torch.nn.Linear(1024, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 1024, device="cuda")
y = torch.randint(0, 10, (512,), device="cuda")
norms = []
while True:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    for p in model.parameters():
        norms.append(p.grad.norm().item())
    del norms[:-1000]
    optimizer.step()
"""

RESNET_JOB = r"""
import torch
def block(c_in, c_out, stride):
    return torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(c_out),
                               torch.nn.ReLU(), torch.nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
                               torch.nn.BatchNorm2d(c_out), torch.nn.ReLU())
model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU(), block(64, 64, 1), block(64, 128, 2),
                            block(128, 256, 2), block(256, 512, 2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(512, 1000)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(128, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (128,), device="cuda")
while True:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def diagnose(args: list[str], timeout: float = 60) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "gpumon", "diagnose", "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def shares(finding: dict[str, Any]) -> dict[str, float]:
    return {f["category"]: f["severity"] for f in (finding, *finding.get("secondary", []))}


def finding_of(result: dict[str, Any]) -> dict[str, Any]:
    return result.get("finding", result)


def test_pageable_batches_name_the_transfer_with_its_share() -> None:
    result = diagnose(["--duration", "15", "--warmup", "3", "--", sys.executable, "-c", PAGEABLE_JOB])
    finding = finding_of(result)
    found = shares(finding)
    assert "transfer_bound" in found, finding
    assert found["transfer_bound"] >= 0.15
    assert sum(found.values()) <= 1.0 + 1e-6
    transfer = (
        finding
        if finding["category"] == "transfer_bound"
        else next(f for f in finding["secondary"] if f["category"] == "transfer_bound")
    )
    assert "pageable" in transfer["evidence"] and "host->device copies take" in transfer["evidence"]


def test_item_per_parameter_is_host_sync_hooked_and_with_py_spy() -> None:
    hooked = finding_of(diagnose(["--duration", "15", "--warmup", "3", "--", sys.executable, "-c", ITEM_JOB]))
    assert hooked["category"] == "host_sync", hooked
    assert "<string>" in hooked["evidence"] and "torch/" not in hooked["evidence"].split("most at", 1)[-1][:40]
    env = {**os.environ, "GPUMON_HOOK": "0"}
    job = subprocess.Popen([sys.executable, "-c", ITEM_JOB], env=env, cwd=REPO_ROOT)
    try:
        time.sleep(8)
        spied = finding_of(diagnose(["--pid", str(job.pid), "--duration", "15"]))
    finally:
        job.kill()
        job.wait()
    assert spied["category"] == "host_sync" or "host_sync" in shares(spied), spied


def test_fp32_resnet_evidence_says_what_tf32_is_on() -> None:
    finding = finding_of(diagnose(["--duration", "15", "--warmup", "5", "--", sys.executable, "-c", RESNET_JOB]))
    every = [finding, *finding.get("secondary", [])]
    for item in every:
        assert "TF32 off)" not in item["evidence"], item
    precision = [item for item in every if item["category"] == "low_precision"]
    for item in precision:
        assert "on for cuDNN convolutions" in item["evidence"], item
