"""ddp_manual_allreduce: 2 ranks (torchrun --nproc-per-node 2; NCCL on GPUs, gloo on the CPU) train an MLP of
8 Linear(4096, 4096)+LayerNorm layers (bf16 autocast on CUDA, batch 2048) and average the gradients by hand after
backward: one dist.all_reduce per parameter (32 of them, 134M fp32 values, 537 MB), all issued after the whole
backward, none overlapped with compute. Expected: comm_bound. (At batch 8192 on 2x H200 over NVLink the
communication was 13% of the step, under the advisor's 15% bar, and gpumon rightly said healthy: 2026-11-27.)
Exits 3 when not under torchrun with 2+ ranks, or with fewer CUDA devices than ranks.

--fix no_comm: skip the all-reduce (the ranks drift apart: this measures what communication costs, the truth of the
comm share).
--fix ddp: wrap the model in DistributedDataParallel instead (bucketed all-reduce overlapped with backward).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from scenario_common import Meter, not_here, parse, pick_device
from torch import nn
from torch.nn.parallel import DistributedDataParallel

FIXES = ("no_comm", "ddp")


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    if "no_comm" in args.fix and "ddp" in args.fix:
        not_here("--fix no_comm and --fix ddp are alternatives")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2 or "LOCAL_RANK" not in os.environ:
        not_here("run it under torchrun with 2 ranks: torchrun --standalone --nproc-per-node 2 ddp_manual_allreduce.py")
    device = pick_device(args.device)
    local_rank = int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        if torch.cuda.device_count() < world:
            not_here(f"{world} ranks need {world} CUDA devices, {torch.cuda.device_count()} here")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    flags = dist.new_group(backend="gloo")  # the stop flag goes over gloo on the host: no GPU sync

    def agree(stop: bool) -> bool:
        flag = torch.tensor([1 if stop else 0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=flags)
        return bool(flag[0])

    width, depth, batch = (4096, 8, 2048) if device.type == "cuda" else (256, 4, 64)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU()]
    model: nn.Module = nn.Sequential(*layers).to(device)
    if "ddp" in args.fix:
        model = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)
    manual = not args.fix
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=1e-4)
    x = torch.randn(batch, width, device=device)
    meter = Meter(
        "ddp_manual_allreduce",
        args.fix,
        device,
        args.duration,
        args.warmup,
        batch * world,
        report=dist.get_rank() == 0,
        agree=agree,
        check_every=10,
    )
    for _ in meter:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if manual:
            for p in params:  # one collective per parameter, after the whole backward
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        optimizer.step()
    meter.report()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
