"""healthy_bf16: 3 Linear(8192, 8192) layers on an 8192-row batch under bf16 autocast, the data made once on the
device: large tensor-core matmuls back to back, the host far ahead of the GPU. Expected: healthy (no cause to fix).
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, parse, pick_device
from torch import nn

FIXES: tuple[str, ...] = ()


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    width, batch = (8192, 8192) if device.type == "cuda" else (512, 256)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(3)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    meter = Meter("healthy_bf16", args.fix, device, args.duration, args.warmup, batch)
    for _ in meter:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
