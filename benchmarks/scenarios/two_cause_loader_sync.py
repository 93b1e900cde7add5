"""two_cause_loader_sync: two causes at once. The loader is slow (Dataset.__getitem__ does ~1 ms of CPU
augmentation a sample behind 2 workers), and the loop reads the loss with .item() every step (a host sync), so the
host cannot queue the next step while the GPU (a mid-size CNN, several ms a step) computes. Expected: input_bound
first, host_sync second; the causes overlap, so ablate each alone and both.

--fix cached: the loading removed: one batch from the loader, reused every step (the data wait's whole share).
--fix workers: num_workers = the cores but two (at least 2; on the H200 they still cannot keep up: a partial fix).
--fix no_sync: the running loss summed on the device, read once every 100 steps.
"""

from __future__ import annotations

import sys

import torch
from scenario_common import (
    Heavy96,
    LossReader,
    Meter,
    forever,
    many_workers,
    parse,
    pick_device,
    small_cnn,
    to_device,
    train_classifier,
)
from torch.utils.data import DataLoader

FIXES = ("cached", "workers", "no_sync")


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    workers = many_workers() if "workers" in args.fix else 2
    no_sync = "no_sync" in args.fix
    batch = 128 if device.type == "cuda" else 16
    pinned = device.type == "cuda"
    loader = DataLoader(Heavy96(rounds=6), batch_size=batch, num_workers=workers, pin_memory=pinned)
    model = small_cnn(channels=128).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    meter = Meter("two_cause_loader_sync", args.fix, device, args.duration, args.warmup, batch)
    batches = forever(loader)
    if "cached" in args.fix:
        batches = forever([next(batches)])
    reader = LossReader(device, every_step=not no_sync)
    train_classifier(meter, batches, model, optimizer, to_device(device, pinned), reader)
    return 0


if __name__ == "__main__":
    sys.exit(main())
