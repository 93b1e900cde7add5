"""A hooked CPU training loop that runs torch.profiler itself the whole time (torch allows one profiler at a time).

Prints {"event": "ready", "pid"} once training starts.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

import gpumon.hook  # noqa: F401 - the line a user adds


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    torch.set_num_threads(1)
    model = torch.nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    started = time.monotonic()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        announced = False
        while time.monotonic() - started < seconds:
            loss = model(torch.randn(8, 16)).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(0.005)
            if not announced:
                announced = True
                print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)


if __name__ == "__main__":
    main()
