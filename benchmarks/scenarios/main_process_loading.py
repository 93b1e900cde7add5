"""main_process_loading: num_workers=0, so the training process itself runs each sample's __getitem__ (a 3x96x96
image, flip, colour jitter, 3 rounds of 5x5 smoothing: about 0.5 ms a sample) and collates the batch while the GPU
waits. Expected: input_bound.

--fix workers: num_workers = the cores but two (at least 2), pin_memory on CUDA.
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

FIXES = ("workers",)


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    fixed = "workers" in args.fix
    batch = 64 if device.type == "cuda" else 16
    pinned = fixed and device.type == "cuda"
    loader = DataLoader(
        Heavy96(rounds=3), batch_size=batch, num_workers=many_workers() if fixed else 0, pin_memory=pinned
    )
    model = small_cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    meter = Meter("main_process_loading", args.fix, device, args.duration, args.warmup, batch)
    train_classifier(meter, forever(loader), model, optimizer, to_device(device, pinned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
