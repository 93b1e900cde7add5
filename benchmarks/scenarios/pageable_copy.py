"""pageable_copy: ready 256 MiB float32 batches in pageable host memory, each copied with a blocking .to(device)
(the driver stages it through its own pinned buffer while the host waits) before a step with almost no compute.
Expected: transfer_bound.

--fix pinned: the batches live in page-locked memory (allocated pinned once, as a loader filling pinned buffers
would; pin_memory=True is then a no-op for them) and are copied with non_blocking=True.
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, forever, parse, pick_device
from torch import nn
from torch.utils.data import DataLoader, Dataset

FIXES = ("pinned",)


class ReadyBatches(Dataset[torch.Tensor]):
    """Two batches made once and handed out in turn: no per-step CPU work in the loader."""

    def __init__(self, shape: tuple[int, ...], pinned: bool) -> None:
        self.pool = [torch.randn(shape) for _ in range(2)]
        if pinned:
            self.pool = [batch.pin_memory() for batch in self.pool]

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.pool[index % len(self.pool)]


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    pinned = "pinned" in args.fix and device.type == "cuda"
    rows = 64 if device.type == "cuda" else 2  # 64 x 1024 x 1024 float32: 256 MiB (8 MiB on the CPU)
    loader = DataLoader(ReadyBatches((rows, 1024, 1024), pinned), batch_size=None, num_workers=0, pin_memory=pinned)
    model = nn.Linear(1024, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    meter = Meter("pageable_copy", args.fix, device, args.duration, args.warmup, rows)
    for _, batch in zip(meter, forever(loader), strict=False):
        x = batch.to(device, non_blocking=pinned)
        loss = model(x[:, :16].mean(dim=1)).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
