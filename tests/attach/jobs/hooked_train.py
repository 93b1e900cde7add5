"""A small CPU training loop for the attach tests; hooked by `import gpumon.hook` unless --no-import (gpumon run).

Prints {"event": "ready", "pid", "hooked"} once training starts and {"event": "done", "steps", "hooked"} at the
end; exits with --exit-code. --step-sleep-ms makes each step slower (a straggler rank), --item-sleep-ms makes the
DataLoader slow
(--fast-after S: 10x faster data after S seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--no-import" not in sys.argv:
    import gpumon.hook  # noqa: F401 - the line a user adds

import torch
from torch.utils.data import DataLoader, Dataset


class SleepyDataset(Dataset):
    def __init__(self, size: int, sleep_s: float, fast_from: float | None = None) -> None:
        self.size = size
        self.sleep_s = sleep_s
        self.fast_from = fast_from
        """Unix time from which items come 10x faster (workers see it too)."""

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        sleep_s = self.sleep_s
        if self.fast_from is not None and time.time() >= self.fast_from:
            sleep_s /= 10
        if sleep_s:
            time.sleep(sleep_s)
        return torch.full((16,), float(index % 7)), torch.tensor(index % 2)


def hooked() -> bool:
    hook = sys.modules.get("gpumon.hook")
    return bool(hook is not None and hook.is_installed())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: --seconds decides)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--item-sleep-ms", type=float, default=1.0)
    parser.add_argument("--step-sleep-ms", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--fast-after", type=float, default=None, help="seconds after which the data gets 10x faster")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--no-import", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    fast_from = None if args.fast_after is None else time.time() + args.fast_after
    loader = DataLoader(
        SleepyDataset(1_000_000, args.item_sleep_ms / 1e3, fast_from),
        batch_size=args.batch,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    steps = 0
    started = time.monotonic()
    announced = False
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1e3)
        if not announced:
            announced = True
            print(json.dumps({"event": "ready", "pid": os.getpid(), "hooked": hooked()}), flush=True)
        if (args.steps and steps >= args.steps) or (not args.steps and time.monotonic() - started > args.seconds):
            break
    print(json.dumps({"event": "done", "steps": steps, "hooked": hooked()}), flush=True)
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
