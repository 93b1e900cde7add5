"""fp32_matmul: 4 Linear(4096, 4096) layers on a 4096-row batch in plain fp32 with TF32 off: the GPU is busy but
its tensor cores idle (fp32 runs on the CUDA cores at a fraction of the bf16 rate). Expected: low_precision.

--fix bf16: the forward under torch.autocast(bfloat16) (fp32 master weights; TF32 stays off).
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, parse, pick_device
from torch import nn

FIXES = ("bf16",)


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    width, batch = (4096, 4096) if device.type == "cuda" else (512, 256)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(4)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    bf16 = "bf16" in args.fix
    meter = Meter("fp32_matmul", args.fix, device, args.duration, args.warmup, batch)
    for _ in meter:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
