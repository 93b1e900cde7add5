"""A CPU training loop WITHOUT the gpumon hook, for the py-spy fallback: each mode makes one phase dominate.

Modes: data (2 workers, slow dataset: the main thread waits on the DataLoader), data_inline (num_workers=0, the
main thread loads), forward (inference with heavy matmuls), backward (a custom autograd op with a slow backward),
optimizer (Adam over a large parameter with cheap forward/backward), sync (a heavy `.item()` line, as a CUDA sync
looks from Python). Prints {"event": "ready", "pid"} once the loop runs; stops after --seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, size: int, sleep_s: float) -> None:
        self.size = size
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        time.sleep(self.sleep_s)
        return torch.full((64,), float(index % 5)), torch.tensor(index % 2)


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.02)
        return grad * 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="data",
                        choices=["data", "data_inline", "forward", "backward", "optimizer", "sync"])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))
    heavy = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)])
    big = torch.nn.Parameter(torch.zeros(4_000_000))
    optimizer = torch.optim.Adam([big] if args.mode == "optimizer" else model.parameters(), lr=1e-3)
    sleep_s = 0.005 if args.mode in ("data", "data_inline") else 0.0
    workers = 2 if args.mode == "data" else 0
    loader = DataLoader(SlowDataset(1_000_000, sleep_s), batch_size=16, num_workers=workers)
    a = torch.randn(512, 512)
    print(json.dumps({"event": "ready", "pid": os.getpid(), "mode": args.mode}), flush=True)
    started = time.monotonic()
    for x, y in loader:
        if time.monotonic() - started > args.seconds:
            break
        if args.mode == "forward":
            with torch.no_grad():
                heavy(torch.randn(64, 1024))
            continue
        if args.mode == "sync":
            _ = (a @ a @ a @ a).sum().item()
            continue
        if args.mode == "optimizer":
            optimizer.zero_grad()
            (big[:10].sum() + model(x).sum() * 0).backward()
            optimizer.step()
            continue
        out = model(x)
        if args.mode == "backward":
            out = SlowBackward.apply(out)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
