"""logging_sync: a GPU-bound MLP (bf16 autocast on CUDA) whose step begins with many tiny elementwise ops on the
input (a per-step rescaling done op by op, each launch longer than its kernel) and whose loop formats the loss every
step (`f"{loss:.4f}"`) and compares it with the best so far (`if loss < best:`), both on CUDA tensors: two host syncs
a step. Without them the host would launch the next step's tiny ops while the GPU runs this step's matmuls; with
them the GPU waits, idle, until the host has launched them. Expected: host_sync.

--fix no_sync: the best loss kept on the device (torch.minimum), the loss formatted only every 100 steps.
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, parse, pick_device
from torch import nn

FIXES = ("no_sync",)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    no_sync = "no_sync" in args.fix
    width, depth, batch = (2048, 2, 4096) if device.type == "cuda" else (128, 2, 256)
    tiny_ops = 80
    model = nn.Sequential(*[Block(width) for _ in range(depth)]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)
    best = torch.tensor(float("inf"), device=device)
    log: list[str] = []
    meter = Meter("logging_sync", args.fix, device, args.duration, args.warmup, batch)
    for step in meter:
        scale = x[:64, :64]
        for _ in range(tiny_ops):  # the per-step rescaling, op by op: launch-bound on its own
            scale = scale * 0.999 + 0.001
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = nn.functional.mse_loss(model(x).float(), target) + scale.mean() * 0.0
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if no_sync:
            best = torch.minimum(best, loss.detach())
            if step % 100 == 0:
                log.append(f"step {step} loss {loss:.4f} best {best:.4f}")
        else:
            log.append(f"step {step} loss {loss:.4f}")  # Tensor.__format__: .item(), a sync
            if loss < best:  # bool() of a CUDA tensor: another sync
                best = loss.detach()
        if len(log) > 1000:
            del log[:-10]
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
