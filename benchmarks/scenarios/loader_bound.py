"""loader_bound: a Dataset whose __getitem__ does real CPU augmentation (a 3x96x96 image, flip, colour jitter,
6 rounds of 5x5 smoothing: about 1 ms of one core a sample) behind only 2 DataLoader workers; the GPU trains a
small CNN in a few ms and waits for the next batch. Expected: input_bound.

--fix cached: the loading removed: one batch from the loader, reused every step (the cause's whole share: the
truth the data-wait share is held to).
--fix workers: num_workers = the cores but two (at least 2), prefetching as before (what that knob gives: with 14
workers this loader still cannot keep up on the H200, so it gains less than the whole share).
"""

from __future__ import annotations

import sys

import torch
from scenario_common import (
    Heavy96,
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

FIXES = ("cached", "workers")


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    workers = many_workers() if "workers" in args.fix else 2
    batch = 64 if device.type == "cuda" else 16
    pinned = device.type == "cuda"
    loader = DataLoader(Heavy96(rounds=6), batch_size=batch, num_workers=workers, pin_memory=pinned)
    model = small_cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    meter = Meter("loader_bound", args.fix, device, args.duration, args.warmup, batch)
    batches = forever(loader)
    if "cached" in args.fix:
        first = next(batches)
        batches = forever([first])
    train_classifier(meter, batches, model, optimizer, to_device(device, pinned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
