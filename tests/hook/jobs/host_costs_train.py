"""A hooked training loop with the host costs the budget names: garbage-collector churn, torch.cuda.empty_cache()
every step, AdamW. Prints {"event": "ready"} once set up and {"event": "done", "empty_cache_line": N} after the loop;
with GPUMON_TEST_RELEASE set it waits for that file before exiting (so the test can still query the hook)."""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

import gpumon.hook  # noqa: F401 - the line a user adds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--churn", type=int, default=2000, help="dicts kept per step (tracked by the collector)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16), torch.randint(0, 2, (8,))
    kept: list[dict[str, int]] = []
    print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
    empty_cache_line = 0
    for step in range(args.steps):
        kept.extend({"step": step, "i": i} for i in range(args.churn))  # the collector's young generation fills
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        empty_cache_line = _line() + 1
        torch.cuda.empty_cache()
    print(json.dumps({"event": "done", "empty_cache_line": empty_cache_line, "kept": len(kept)}), flush=True)
    release = os.environ.get("GPUMON_TEST_RELEASE")
    deadline = time.monotonic() + 30
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


if __name__ == "__main__":
    main()
