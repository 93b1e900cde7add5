"""logging_sync: a GPU-bound residual MLP (bf16 autocast on CUDA) whose loop formats the loss every step
(`f"{loss:.4f}"`) and compares it with the best so far (`if loss < best:`), both on CUDA tensors: two host syncs a
step, so the host never runs ahead and the GPU idles while the next step's Python and launches run. Expected:
host_sync.

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
    width, depth, batch = (1024, 12, 4096) if device.type == "cuda" else (128, 4, 256)
    model = nn.Sequential(*[Block(width) for _ in range(depth)]).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)
    best = torch.tensor(float("inf"), device=device)
    log: list[str] = []
    meter = Meter("logging_sync", args.fix, device, args.duration, args.warmup, batch)
    for step in meter:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = nn.functional.mse_loss(model(x).float(), target)
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
