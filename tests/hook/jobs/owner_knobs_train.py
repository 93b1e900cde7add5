"""A hooked job that calls torch.cuda.empty_cache() every step; it notes what the owner knobs changed in it.

torch.cuda.empty_cache is replaced by a counting stand-in before the hook wraps it, so the job sees which calls reach
it. The job trains until step `--pause` numbers (one at a time): there it says {"event": "paused", "step"} and waits
for `<control>/go<k>`. At each step it notes gc.get_threshold(), gc.get_freeze_count(), the calls that reached
empty_cache and the hook's count of skipped ones. At the end it writes the notes to `<control>/result.json`, says
{"event": "done"} and waits for `<control>/release`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch

reached = [0]


def counting_empty_cache() -> None:
    reached[0] += 1


torch.cuda.empty_cache = counting_empty_cache  # before the hook: its wrapper calls this one

import gpumon.hook  # noqa: E402, F401 - the line a user adds
from gpumon.hook import lifecycle  # noqa: E402

WAIT_S = 60.0


def wait_for(path: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path} within {WAIT_S} s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--control", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--pause", type=int, action="append", default=[])
    args = parser.parse_args()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    runtime = lifecycle.runtime()
    notes = []
    pauses = sorted(args.pause)
    for step in range(1, args.steps + 1):
        loss = model(torch.randn(8, 4)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch.cuda.empty_cache()
        notes.append(
            {
                "step": step,
                "threshold": list(gc.get_threshold()),
                "frozen": gc.get_freeze_count(),
                "reached": reached[0],
                "skipped": runtime.empty_cache.skipped if runtime is not None else -1,
            }
        )
        if pauses and step == pauses[0]:
            pauses.pop(0)
            print(json.dumps({"event": "paused", "step": step}), flush=True)
            wait_for(os.path.join(args.control, f"go{step}"))
    with open(os.path.join(args.control, "result.json"), "w") as out:
        json.dump({"notes": notes, "default_threshold": list(gc.get_threshold())}, out)
    print(json.dumps({"event": "done"}), flush=True)
    wait_for(os.path.join(args.control, "release"))


if __name__ == "__main__":
    main()
