"""Runs the demo trainer through a cumulative ladder of knobs; prints samples/s and GPU-Util per rung.

Each rung is a separate run of `python -m gpumon_demo --json` with GPUMON_KNOBS set; samples/s is the
trainer's steady-state figure (warm-up excluded), GPU-Util the mean of `nvidia-smi` readings over
the last `--window` seconds of the run. `--repeats N` runs the whole ladder N times, interleaved, so
machine noise spreads over every rung. Usage (repo root):

    python benchmarks/demo_ladder.py --duration 25 --repeats 2            # on a GPU machine
    python benchmarks/demo_ladder.py --device cpu --ladder cpu --repeats 3 # on a CPU-only box
    python benchmarks/demo_ladder.py --ceiling                              # model alone, data on the GPU
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

LADDERS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "gpu": [
        ("baseline", {}),
        ("num_workers 0 -> 14", {"num_workers": 14}),
        ("pin_memory", {"pin_memory": True}),
        ("persistent_workers", {"persistent_workers": True}),
        ("amp_bf16", {"amp_bf16": True}),
        ("channels_last", {"channels_last": True}),
        ("batch_size 32 -> 256", {"batch_size": 256}),
        ("log_every 1 -> 50", {"log_every": 50}),
        ("cudnn_benchmark", {"cudnn_benchmark": True}),
    ],
    "cpu": [
        ("baseline", {}),
        ("num_workers 0 -> 2", {"num_workers": 2}),
    ],
}


class GpuUtilization:
    """Polls `nvidia-smi` on a thread and keeps (time, GPU-Util %) readings of GPU 0."""

    def __init__(self, interval_ms: int = 200) -> None:
        self.readings: list[tuple[float, float]] = []
        self._process: subprocess.Popen[str] | None = None
        if shutil.which("nvidia-smi") is None:
            return
        self._process = subprocess.Popen(
            [
                "nvidia-smi", "--id=0", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                f"-lms={interval_ms}",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                self.readings.append((time.monotonic(), float(line.strip())))
            except ValueError:
                continue

    def mean(self, start: float, end: float) -> float | None:
        values = [value for when, value in self.readings if start <= when <= end]
        return statistics.fmean(values) if values else None

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()


def run_rung(knobs: dict[str, Any], args: argparse.Namespace, gpu: GpuUtilization) -> dict[str, Any]:
    command = [sys.executable, "-m", "gpumon_demo", "--json", "--duration", str(args.duration), "--device", args.device,
               "--progress-interval", "0", "--warmup-steps", str(args.warmup_steps)]  # fmt: skip
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=os.environ | {"GPUMON_KNOBS": json.dumps(knobs)},
        capture_output=True, text=True, timeout=args.duration + 300,
    )  # fmt: skip
    ended = time.monotonic()
    if result.returncode != 0:
        return {"error": result.stderr.strip().splitlines()[-1:] or [f"exit {result.returncode}"]}
    summary = json.loads(result.stdout)
    return {
        "samples_per_s": summary["samples_per_s"],
        "gpu_util": gpu.mean(ended - args.window - 1.0, ended - 1.0),
        "main_cpu_ms_per_sample": summary["steady"]["main_cpu_s_per_sample"] * 1000,
        "peak_memory_bytes": summary["peak_memory_bytes"],
        "device_name": summary["device_name"],
        "torch": summary["torch"],
    }


def ceiling(device_name: str) -> None:
    """Samples/s of the full model alone, data already on the GPU, fully tuned (bf16, NHWC, batch 256)."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO_ROOT / "demo"))
    from gpumon_demo.model import SmallResNet
    from gpumon_demo.trainer import PROFILES

    profile = PROFILES["full"]
    device = torch.device(device_name)
    torch.backends.cudnn.benchmark = True
    for batch_size, amp, channels_last in ((32, False, False), (256, True, True)):
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        model = SmallResNet(100, profile.width, profile.stage_blocks, profile.stem_stride)
        model = model.to(device, memory_format=memory_format)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        images = torch.randn(batch_size, 3, profile.crop_size, profile.crop_size, device=device)
        images = images.contiguous(memory_format=memory_format)
        labels = torch.randint(0, 100, (batch_size,), device=device)

        def step() -> None:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        for _ in range(20):
            step()
        torch.cuda.synchronize()
        started = time.perf_counter()
        steps = 100
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        rate = steps * batch_size / (time.perf_counter() - started)
        print(f"ceiling: batch {batch_size} amp_bf16={amp} channels_last={channels_last}: {rate:,.0f} samples/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=25.0, help="seconds per run (default 25)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds at the end of each run for GPU-Util")
    parser.add_argument("--warmup-steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--ladder", choices=sorted(LADDERS), default="gpu")
    parser.add_argument("--ceiling", action="store_true", help="also time the model alone with data on the GPU")
    args = parser.parse_args()

    if args.ceiling:
        ceiling("cuda")
    gpu = GpuUtilization()
    ladder = LADDERS[args.ladder]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in ladder}
    try:
        for repeat in range(args.repeats):
            knobs: dict[str, Any] = {}
            for name, change in ladder:
                knobs = knobs | change
                outcome = run_rung(knobs, args, gpu)
                results[name].append(outcome)
                print(f"[{repeat + 1}/{args.repeats}] {name}: {json.dumps(outcome)}", file=sys.stderr, flush=True)
    finally:
        gpu.stop()

    device = next((r["device_name"] for runs in results.values() for r in runs if "device_name" in r), "?")
    torch_version = next((r["torch"] for runs in results.values() for r in runs if "torch" in r), "?")
    print(f"\n{device}, {os.cpu_count()} CPUs, torch {torch_version}, {platform.python_version()}, "
          f"{datetime.date.today()}, {args.duration:.0f} s per run, {args.repeats} repeat(s)\n")  # fmt: skip
    print(f"{'step':40} {'GPU-Util':>9} {'samples/s':>22} {'speed-up':>9} {'main CPU ms/sample':>19}")
    baseline: float | None = None
    for name, runs in results.items():
        good = [r for r in runs if "error" not in r and r["samples_per_s"] is not None]
        if not good:
            print(f"{name:40} failed: {runs[0].get('error')}")
            continue
        rates = [r["samples_per_s"] for r in good]
        rate = statistics.median(rates)
        baseline = baseline or rate
        utils = [r["gpu_util"] for r in good if r["gpu_util"] is not None]
        util_text = f"{statistics.median(utils):.0f}%" if utils else "n/a"
        rate_text = f"{rate:,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
        cpu = statistics.median(r["main_cpu_ms_per_sample"] for r in good)
        print(f"{name:40} {util_text:>9} {rate_text:>22} {rate / baseline:>8.1f}x {cpu:>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
