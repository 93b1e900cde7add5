"""Small training jobs, one per advisor category, each slow (or fine) for a real reason. Not hooked by themselves:
run them under `gpumon diagnose -- python benchmarks/advisor_jobs.py CASE` (benchmarks/advisor_categories.py
runs them all). Usage: python benchmarks/advisor_jobs.py CASE [--duration S] [--device auto|cpu|cuda]

    input_bound       a CPU-heavy Dataset.__getitem__ (real per-sample work), no DataLoader workers
    host_sync         an MLP whose forward checks every layer's output on the host (two .item() per layer)
                      and synchronizes at each step end
    launch_bound      batch 4 through 40 tiny layers: thousands of microsecond kernels per step
    transfer_bound    a DataLoader of ready 256 MiB pageable batches (pin_memory off), each copied to the GPU,
                      almost no compute
    low_precision     large fp32 matmuls (no autocast, TF32 off): a busy GPU with idle tensor cores
    memory_imbalance  nn.DataParallel over 2 GPUs with big outputs: GPU 0 holds the parameters, gradients,
                      optimizer state and the gathered outputs (needs 2 GPUs: exits 3 with fewer)
    io_bound          a Dataset reading 8 MiB files with O_DIRECT (page cache bypassed; else evicted after
                      each read) through 2 workers doing almost no CPU work
    healthy           large bf16 matmuls under autocast, data already on the GPU
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

CASES = (
    "input_bound",
    "host_sync",
    "launch_bound",
    "transfer_bound",
    "low_precision",
    "memory_imbalance",
    "io_bound",
    "healthy",
)
EXIT_NOT_HERE = 3
"""The case cannot run on this machine (e.g. memory_imbalance with fewer than 2 GPUs)."""


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def running(duration: float):
    """Yields step numbers until `duration` seconds have passed."""
    deadline = time.monotonic() + duration
    step = 0
    while time.monotonic() < deadline:
        yield step
        step += 1


# ---------------------------------------------------------------------------------------------


class CpuHeavyImages(Dataset):
    """Each sample costs real CPU: a 3x96x96 image through 6 rounds of 5x5 convolution-like smoothing."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 96, 96, generator=generator)
        kernel = torch.full((3, 1, 5, 5), 1 / 25)
        for _ in range(6):
            image = torch.nn.functional.conv2d(image.unsqueeze(0), kernel, padding=2, groups=3).squeeze(0)
        return image, index % 10


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def input_bound(device: torch.device, duration: float) -> None:
    torch.set_num_threads(1)  # the main process does the loading, as one core would
    model = small_cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(CpuHeavyImages(), batch_size=64, num_workers=0)
    for _, (images, labels) in zip(running(duration), loader, strict=False):
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def host_sync(device: torch.device, duration: float) -> None:
    width, depth = 1024, 16
    layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth)).to(device)
    optimizer = torch.optim.SGD(layers.parameters(), lr=1e-4)
    x = torch.randn(256, width, device=device)
    target = torch.randn(256, width, device=device)
    stats: list[tuple[float, float]] = []
    for _ in running(duration):
        h = x
        for layer in layers:
            h = torch.relu(layer(h))
            # A per-layer health check on the host: each .item() waits for the GPU to finish its queue.
            stats.append((h.abs().mean().item(), h.max().item()))
            if len(stats) > 1000:
                stats = stats[-10:]
        loss = nn.functional.mse_loss(h, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()


def launch_bound(device: torch.device, duration: float) -> None:
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(40)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 64, device=device)
    target = torch.randn(4, 64, device=device)
    for _ in running(duration):
        loss = nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


class BigBatches(Dataset):
    """Batches already made: each item is a 256 MiB pageable float32 tensor (no collate, no CPU work)."""

    def __init__(self) -> None:
        self.batch = torch.randn(64, 1024, 1024)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.batch


def transfer_bound(device: torch.device, duration: float) -> None:
    model = nn.Linear(1024, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(BigBatches(), batch_size=None, num_workers=0, pin_memory=False)
    for _, batch in zip(running(duration), loader, strict=False):
        batch = batch.to(device)  # a pageable copy: the host waits for it, the GPU computes nothing meanwhile
        loss = model(batch[:, :8].mean(dim=1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def low_precision(device: torch.device, duration: float) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    width = 8192 if device.type == "cuda" else 1024
    batch = 8192 if device.type == "cuda" else 256
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(6)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    for _ in running(duration):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def memory_imbalance(device: torch.device, duration: float) -> None:
    if device.type != "cuda" or torch.cuda.device_count() < 2:
        print("memory_imbalance needs 2 CUDA GPUs (nn.DataParallel); run it on nvidia-h200-x2", file=sys.stderr)
        sys.exit(EXIT_NOT_HERE)
    classes = 32768
    body = nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 8192), nn.ReLU(), nn.Linear(8192, classes))
    model = nn.DataParallel(body.cuda(0), device_ids=[0, 1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)  # its state lives on GPU 0 with the parameters
    x = torch.randn(4096, 4096, device="cuda:0")
    labels = torch.randint(0, classes, (4096,), device="cuda:0")
    for _ in running(duration):
        logits = model(x)  # both halves gathered on GPU 0
        loss = nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


class DirectFiles(Dataset):
    """8 MiB files read whole with O_DIRECT (no page cache), or evicted from the cache after each read where the
    filesystem refuses O_DIRECT. Almost no CPU work: the workers wait on the disk."""

    FILE_BYTES = 8 << 20

    def __init__(self, directory: Path, count: int) -> None:
        self.paths = [directory / f"sample-{i:05d}.bin" for i in range(count)]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        path = self.paths[index]
        buffer = mmap.mmap(-1, self.FILE_BYTES)  # page-aligned, as O_DIRECT wants
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError:
            fd = os.open(path, os.O_RDONLY)
        try:
            try:
                read = os.readv(fd, [buffer])
            except OSError:  # O_DIRECT refused at read time: read through the cache, then drop it
                os.close(fd)
                fd = os.open(path, os.O_RDONLY)
                read = os.readv(fd, [buffer])
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        data = torch.frombuffer(buffer, dtype=torch.uint8, count=min(read, 4096)).float()
        return data[:1024], index % 10


def make_files(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    block = os.urandom(1 << 20)
    for i in range(count):
        path = directory / f"sample-{i:05d}.bin"
        if path.exists() and path.stat().st_size == DirectFiles.FILE_BYTES:
            continue
        with path.open("wb") as stream:
            for _ in range(DirectFiles.FILE_BYTES >> 20):
                stream.write(block)
    os.sync()


def io_bound(device: torch.device, duration: float, data_dir: Path, files: int) -> None:
    make_files(data_dir, files)
    model = nn.Linear(1024, 10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(DirectFiles(data_dir, files), batch_size=8, shuffle=True, num_workers=2)
    steps = running(duration)
    while True:
        for data, labels in loader:
            if next(steps, None) is None:
                return
            loss = nn.functional.cross_entropy(model(data.to(device)), labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def healthy(device: torch.device, duration: float) -> None:
    width = 8192 if device.type == "cuda" else 1024
    batch = 8192 if device.type == "cuda" else 256
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(6)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    for _ in running(duration):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds to train (default 120)")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path("/var/tmp/gpumon-io-bound"),
        help="io_bound: where its files go (a disk, not tmpfs)",
    )
    parser.add_argument("--files", type=int, default=256, help="io_bound: number of 8 MiB files (default 256)")
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    print(f"advisor job {args.case} on {device}", file=sys.stderr, flush=True)
    if args.case == "io_bound":
        io_bound(device, args.duration, args.data_dir, args.files)
    else:
        globals()[args.case](device, args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
