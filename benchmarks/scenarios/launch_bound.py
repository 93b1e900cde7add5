"""launch_bound: batch 4 through 48 tiny Linear(64, 64)+ReLU layers with SGD (momentum): each step is hundreds of
microsecond kernels, so the GPU waits on the host's Python and kernel launches. Expected: launch_bound.

--fix cuda_graph: the whole step (forward, backward, optimizer) captured once in a CUDA graph and replayed; same
work per step (CUDA only: exits 3 elsewhere).
--fix bigger_batch: batch 256 instead of 4, the same kernels: this changes the work per step, so compare the time
per sample, not per step.
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, not_here, parse, pick_device
from torch import nn

FIXES = ("cuda_graph", "bigger_batch")


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    graphed = "cuda_graph" in args.fix
    if graphed and device.type != "cuda":
        not_here("--fix cuda_graph needs CUDA")
    batch = 256 if "bigger_batch" in args.fix else 4
    model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(48)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x = torch.randn(batch, 64, device=device)
    target = torch.randn(batch, 64, device=device)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        return loss

    if graphed:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as capture wants; creates the momentum buffers
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
    meter = Meter("launch_bound", args.fix, device, args.duration, args.warmup, batch)
    for _ in meter:
        if graphed:
            graph.replay()
        else:
            step()
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
