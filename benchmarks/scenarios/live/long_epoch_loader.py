"""long_epoch_loader: loader_bound's CPU-augmenting samples, 10M to an epoch, behind 2 persistent shuffling workers."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from benchmarks.scenarios.scenario_common import Heavy96, forever, pick_device, small_cnn

READY_AFTER_STEPS = 3
"""The READY line comes after this many steps: the hook's server is up and the loader's workers are running."""


class LongEpoch(Heavy96):
    """Heavy96's samples (about 1 ms of one core each), `samples` of them to an epoch."""

    def __init__(self, rounds: int, samples: int) -> None:
        super().__init__(rounds)
        self.samples = samples

    def __len__(self) -> int:
        return self.samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--duration", type=float, default=86400.0, help="seconds to train (default: a day)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--samples", type=int, default=10_000_000, help="samples to an epoch (default 10M)")
    parser.add_argument("--tiny", action="store_true", help="the CPU check's sizes (the default on the CPU)")
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    tiny = args.tiny or device.type == "cpu"
    cuda = device.type == "cuda"
    loader = DataLoader(
        LongEpoch(rounds=6, samples=args.samples),
        batch_size=16 if tiny else 64,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=args.workers,
        pin_memory=cuda,
        persistent_workers=args.workers > 0,
    )
    model = small_cnn(channels=8 if tiny else 64).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    deadline = time.monotonic() + args.duration
    for step, (images, labels) in enumerate(forever(loader)):
        x, y = images.to(device, non_blocking=cuda), labels.to(device, non_blocking=cuda)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        if step + 1 == READY_AFTER_STEPS:
            print(f"READY pid={os.getpid()}", flush=True)
        if time.monotonic() >= deadline:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
