"""owner_churn: a short GPU step beside an owner of idle time that a live knob removes; it times its own truth first."""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.scenarios.scenario_common import pick_device

CAUSES = ("gc_churn", "empty_cache")
"""gc_churn: per-sample records (a dict holding lists, as the generated corpus's gc_churn family makes them) appended
to a history list whose older half is dropped once it holds `kept`, so the collector keeps running and its full
passes walk a large heap (a bounded deque would free one record per record made: no net allocation, hardly a
collection); removed: the records still made and dropped, the collector frozen and disabled. empty_cache:
torch.cuda.empty_cache() after every step, so each step's activations go back to the driver and are cudaMalloc'd
again (and the call waits for the device); removed: no call."""
MIN_WINDOW_STEPS = 5


class Job:
    """The model, its batch on the device and the cause, present or removed."""

    def __init__(self, cause: str, device: torch.device, tiny: bool) -> None:
        self.cause = cause
        self.device = device
        width, depth, batch = (64, 2, 64) if tiny else ((2048, 8, 2048) if cause == "empty_cache" else (1024, 4, 512))
        self.batch = batch
        torch.manual_seed(0)
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.GELU()]
        self.model = nn.Sequential(*layers, nn.Linear(width, 10)).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.x = torch.randn(batch, width, device=device)
        self.y = torch.randint(0, 10, (batch,), device=device)
        self.records = (2_000 if tiny else 20_000) if cause == "gc_churn" else 0
        self.kept = 50_000 if tiny else 500_000
        self.history: list[dict[str, Any]] = []
        self.present = True
        self.steps = 0
        if self.records:  # half full from the start: the collector's work is about the same in every window
            for i in range(self.kept // 2):
                self.history.append({"step": -1, "sample": i, "tags": [i % 7, 0], "seen": [-1]})

    def set_present(self, present: bool) -> None:
        if self.cause == "gc_churn" and present != self.present:
            if present:
                gc.unfreeze()
                gc.enable()
            else:
                gc.freeze()
                gc.disable()
        self.present = present

    def step(self) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            logits = self.model(self.x)
        loss = F.cross_entropy(logits.float(), self.y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        step = self.steps
        for i in range(self.records):
            self.history.append({"step": step, "sample": i, "tags": [i % 7, step % 3], "seen": [step]})
        if len(self.history) > self.kept:
            del self.history[: len(self.history) // 2]
        if self.cause == "empty_cache" and self.present:
            torch.cuda.empty_cache()  # a no-op where CUDA is not initialised
        self.steps += 1

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def train_until(self, deadline: float, min_steps: int = 1, stop: Callable[[], bool] | None = None) -> int:
        start = self.steps
        while self.steps - start < min_steps or time.monotonic() < deadline:
            self.step()
            if stop is not None and stop():
                break
        return self.steps - start

    def window(self, present: bool, settle_s: float, window_s: float) -> float:
        """One timed window: samples/s between two synchronizes, after `settle_s` seconds in the new state."""
        self.set_present(present)
        self.train_until(time.monotonic() + settle_s, min_steps=2)
        self.sync()
        started = time.monotonic()
        steps = self.train_until(started + window_s, min_steps=MIN_WINDOW_STEPS)
        self.sync()
        return steps * self.batch / (time.monotonic() - started)


def truth(job: Job, rounds: int, settle_s: float, window_s: float) -> dict[str, Any]:
    """The cause present against removed, in alternating windows (the order reversed every other round)."""
    rates: dict[str, list[float]] = {"present": [], "removed": []}
    for round_ in range(rounds):
        order = (True, False) if round_ % 2 == 0 else (False, True)
        for present in order:
            rates["present" if present else "removed"].append(round(job.window(present, settle_s, window_s), 3))
    job.set_present(True)
    with_it, without = statistics.median(rates["present"]), statistics.median(rates["removed"])
    return {
        "rates": rates,
        "median_samples_per_s": {"present": round(with_it, 3), "removed": round(without, 3)},
        "speedup": round(without / with_it, 4) if with_it > 0 else None,
        "share": round(1.0 - with_it / without, 4) if without > 0 else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cause", choices=CAUSES, required=True)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--tiny", action="store_true", help="the CPU check's sizes (the default on the CPU)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds trained before the truth (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="windows per variant for the truth (default 3)")
    parser.add_argument("--window", type=float, default=1.5, help="seconds per truth window (default 1.5)")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds left out before each window")
    parser.add_argument("--duration", type=float, default=86400.0, help="seconds trained after the truth")
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    job = Job(args.cause, device, args.tiny or device.type == "cpu")
    job.train_until(time.monotonic() + args.warmup, min_steps=3)
    measured = truth(job, args.rounds, args.settle, args.window) if args.rounds > 0 else None
    line = {"cause": args.cause, "device": str(device), "samples_per_step": job.batch, "truth": measured}
    print("TRUTH " + json.dumps(line), flush=True)
    print(f"READY pid={os.getpid()}", flush=True)
    job.train_until(time.monotonic() + args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
