"""CPU cost of the sampling layer alone: per fast and slow tick, and of the threaded Sampler at 1 s and 0.25 s."""

from __future__ import annotations

import argparse
import os
import signal
import platform
import socket
import subprocess
import sys
import time

from gpumon.sampling.sampler import Sampler

LOAD = """
import subprocess, sys, time, torch
workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(4)]
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
try:
    while True:
        for _ in range(50):
            a @ a
        torch.cuda.synchronize()
        time.sleep(0.01)
finally:
    for worker in workers:
        worker.kill()
"""


def tick_costs(fast: int, slow: int, pause: float) -> None:
    sampler = Sampler()
    sampler.sample_once(window=0.1)  # opens NVML, primes every counter
    started = time.process_time()
    for _ in range(fast):
        sampler.history.add(sampler._build_snapshot())
        time.sleep(pause)
    fast_cost = (time.process_time() - started) / fast
    started = time.process_time()
    for _ in range(slow):
        sampler._collect_slow()
        time.sleep(pause)
    slow_cost = (time.process_time() - started) / slow
    snapshot = sampler._build_snapshot()
    sampler.stop()
    print(f"GPUs: {len(snapshot.gpus)} ({snapshot.gpu_error or 'NVML ok'}); GPM: {[gpu.has_gpm for gpu in snapshot.gpus]}")
    print(f"GPU processes: {len(snapshot.processes)}, with {sum(len(p.children) for p in snapshot.processes)} children")
    print(f"fast tick: {fast_cost * 1e6:8.0f} us CPU (mean of {fast})")
    print(f"slow tick: {slow_cost * 1e6:8.0f} us CPU (mean of {slow})")


def threaded_cost(interval: float, seconds: float) -> float:
    sampler = Sampler(interval=interval)
    delivered = []
    started_cpu, started_wall = time.process_time(), time.monotonic()
    sampler.start(delivered.append)
    time.sleep(seconds)
    sampler.stop()
    cpu, wall = time.process_time() - started_cpu, time.monotonic() - started_wall
    print(f"threaded Sampler at {interval:g} s: {100 * cpu / wall:5.2f}% of one core over {wall:.1f} s, {len(delivered)} snapshots")
    return cpu / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fast", type=int, default=100)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--pause", type=float, default=0.01, help="seconds between ticks, so rates have something to measure")
    parser.add_argument("--threaded", type=float, default=0.0, help="also run the threaded Sampler this many seconds per interval")
    parser.add_argument("--load", action="store_true", help="run a bf16 matmul load with 4 worker children meanwhile")
    args = parser.parse_args()
    print(f"{socket.gethostname()} {platform.platform()} python {platform.python_version()} {time.strftime('%Y-%m-%d %H:%M')}")
    load = None
    if args.load:
        load = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert load.stdout is not None and load.stdout.readline().strip() == "ready"
    try:
        tick_costs(args.fast, args.slow, args.pause)
        if args.threaded > 0:
            for interval in (1.0, 0.25):
                threaded_cost(interval, args.threaded)
    finally:
        if load is not None:
            os.killpg(load.pid, signal.SIGKILL)  # the load and its worker children
            load.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
