"""What the hook's stack sampler costs a training loop: microseconds per sample, and the loop's steps/s with the
sampler's thread at 0, 20 (the default) and 200 samples a second, alternated in one process.

The sampler holds the GIL while it reads and classifies the training thread's stack, so its cost to the loop is
about samples/s x the time a sample takes; 200 Hz makes that ten times the default's, large enough to show in
steps/s through the noise of a shared machine, and the default's share is read from it. The loop is a launch-bound
CPU one (40 Linear(64, 64) layers, batch 4, SGD: a deep module stack at every sample). On a CPU build the GPU's state
is not read, so a CUDA stream query (a few microseconds) is not in these figures.

    python benchmarks/sampler_cost.py --rounds 12 --window 2.0 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch
from torch import nn

from gpumon.hook.stack_sampler import StackSampler


class Loop:
    """The training loop on its own thread; counts steps until stopped."""

    def __init__(self) -> None:
        torch.set_num_threads(1)
        self.model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.ReLU()) for _ in range(40)])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(4, 64)
        self.steps = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            loss = self.model(self.x).square().mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.steps += 1


def per_sample(sampler: StackSampler, samples: int) -> dict[str, float]:
    """Wall and CPU microseconds of one sample, taken back to back from this thread."""
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for _ in range(samples):
        sampler.sample_once()
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    return {"wall_us": wall / samples * 1e6, "cpu_us": cpu / samples * 1e6}


def window(loop: Loop, seconds: float) -> float:
    start_steps, start = loop.steps, time.perf_counter()
    time.sleep(seconds)
    return (loop.steps - start_steps) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--window", type=float, default=2.0, help="seconds per timed window")
    parser.add_argument("--samples", type=int, default=2000, help="back-to-back samples for the per-sample cost")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

    loop = Loop()
    loop.thread.start()
    while loop.steps < 50:
        time.sleep(0.05)
    runtime = SimpleNamespace(training_thread=loop.thread.ident, cuda_device=None, gpu=None, error=lambda exc: None)
    cost = per_sample(StackSampler(runtime, torch, hz=20), args.samples)
    rates: dict[str, list[float]] = {"0": [], "20": [], "200": []}
    for round_index in range(args.rounds):
        order = list(rates) if round_index % 2 == 0 else list(reversed(rates))
        for hz in order:
            sampler = StackSampler(runtime, torch, hz=float(hz)) if hz != "0" else None
            if sampler is not None:
                sampler.start()
            rates[hz].append(window(loop, args.window))
            if sampler is not None:
                sampler.stop()
        print(f"round {round_index + 1}: " + "  ".join(f"{hz} Hz {rates[hz][-1]:.1f}" for hz in rates), file=sys.stderr)
    loop.stop.set()
    loop.thread.join(5)

    def paired(hz: str) -> float:
        return (1 - statistics.median(a / b for a, b in zip(rates[hz], rates["0"], strict=True))) * 100

    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.processor() or platform.machine()}, python {platform.python_version()}, "
        f"torch {torch.__version__}",
        "per_sample": cost,
        "steps_per_s": {hz: statistics.median(values) for hz, values in rates.items()},
        "overhead_pct": {hz: paired(hz) for hz in ("20", "200")},
        "default_share_from_per_sample_pct": cost["wall_us"] * 20 / 1e6 * 100,
        "raw": rates,
    }
    print(
        f"sampler cost: {cost['wall_us']:.1f} us a sample ({cost['cpu_us']:.1f} us CPU); at 20 Hz "
        f"{results['default_share_from_per_sample_pct']:.3f}% of the loop's time by the per-sample cost"
    )
    print(
        "steps/s median: "
        + ", ".join(f"{hz} Hz {rate:.1f}" for hz, rate in results["steps_per_s"].items())
        + "; paired overhead: "
        + ", ".join(f"{hz} Hz {pct:+.2f}%" for hz, pct in results["overhead_pct"].items())
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
