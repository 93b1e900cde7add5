"""Measures the demo's balance on a GPU machine: CPU augmentation cost, worker pipeline capacity, model GPU time.

The demo must start at <= 30% GPU-Util (main-process augmentation, fp32, batch 32) and end GPU-bound
after the guided fixes (workers, bf16, channels_last, batch 256). Both hinge on three numbers this
prints: per-sample augmentation in the main process (A), the workers' pipeline capacity, and the
model's GPU time per sample in the slow and the tuned configuration. Usage: python benchmarks/demo_calibrate.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "demo"))

from gpumon_demo.augment import augment_batch
from gpumon_demo.data import SyntheticImages
from gpumon_demo.model import SmallResNet
from gpumon_demo.trainer import PROFILES

VARIANTS = [
    # (label, width, stage blocks, stem stride)
    ("w64 2222 s2", 64, (2, 2, 2, 2), 2),
    ("w96 2222 s2", 96, (2, 2, 2, 2), 2),
    ("w32 2222 s1", 32, (2, 2, 2, 2), 1),
    ("w40 2222 s1", 40, (2, 2, 2, 2), 1),
    ("w48 2222 s1", 48, (2, 2, 2, 2), 1),
    ("w64 2222 s1", 64, (2, 2, 2, 2), 1),
]


def per_sample_ms(function, samples_per_call: int, calls: int, sync: bool = True) -> float:
    for _ in range(5):
        function()
    if sync:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        function()
    if sync:
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / (calls * samples_per_call) * 1000


def augmentation_cost(crop: int, image_size: int) -> None:
    dataset = SyntheticImages(10_000, image_size)
    indices = torch.arange(32)
    raw = torch.stack([dataset.image(i)[0] for i in range(32)])
    threads = torch.get_num_threads()
    main_ms = per_sample_ms(lambda: augment_batch(raw, indices, crop, 0), 32, 20, sync=False)
    torch.set_num_threads(1)
    single_ms = per_sample_ms(lambda: augment_batch(raw, indices, crop, 0), 32, 20, sync=False)
    torch.set_num_threads(threads)
    print(f"augmentation per sample: {main_ms:.2f} ms with {threads} threads, {single_ms:.2f} ms with 1 thread")


def pipeline_capacity(workers: int, batch_size: int, crop: int, image_size: int) -> None:
    dataset = SyntheticImages(50_000, image_size, augment_out_size=crop)
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=True, drop_last=True, num_workers=workers, pin_memory=True
    )
    iterator = iter(loader)
    for _ in range(workers * 2):
        next(iterator)
    started = time.perf_counter()
    batches = max(20, 4000 // batch_size)
    for _ in range(batches):
        next(iterator)
    rate = batches * batch_size / (time.perf_counter() - started)
    del iterator
    print(f"pipeline: {workers} workers, batch {batch_size}, augment in workers, pinned: {rate:,.0f} samples/s")


def model_times(label: str, width: int, stage_blocks: tuple[int, ...], stem_stride: int, crop: int) -> None:
    device = torch.device("cuda")
    results = []
    configs = (
        # batch, bf16, channels_last, cudnn.benchmark, cuDNN TF32 (PyTorch's default is on)
        (32, False, False, False, False),
        (32, False, False, False, True),
        (32, True, True, False, True),
        (256, True, True, True, True),
    )
    for batch_size, amp, channels_last, benchmark, conv_tf32 in configs:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = conv_tf32
        torch.backends.cudnn.benchmark = benchmark
        memory_format = torch.channels_last if channels_last else torch.contiguous_format
        model = SmallResNet(100, width, stage_blocks, stem_stride).to(device, memory_format=memory_format)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        images = torch.randn(batch_size, 3, crop, crop, device=device).contiguous(memory_format=memory_format)
        labels = torch.randint(0, 100, (batch_size,), device=device)

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            loss.item()

        results.append(per_sample_ms(step, batch_size, max(10, 3000 // batch_size)))
    fp32, fp32_default, bf16_32, best = results
    print(
        f"model {label:12} ms/sample: fp32 b32 {fp32:.3f}  fp32 (cuDNN TF32 default) b32 {fp32_default:.3f}  "
        f"bf16 NHWC b32 {bf16_32:.3f}  bf16 NHWC b256 {best:.3f} ({1000 / best:,.0f} samples/s)  "
        f"default/best {fp32_default / best:.1f}"
    )


def main() -> None:
    profile = PROFILES["full"]
    print(f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    augmentation_cost(profile.crop_size, profile.image_size)
    for label, width, stage_blocks, stem_stride in VARIANTS:
        model_times(label, width, stage_blocks, stem_stride, profile.crop_size)
    if "--pipeline" in sys.argv:
        for workers in (12, 14):
            pipeline_capacity(workers, 256, profile.crop_size, profile.image_size)


if __name__ == "__main__":
    main()
