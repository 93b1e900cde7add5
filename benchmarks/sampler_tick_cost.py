"""CPU cost of the sampling layer alone: per fast and slow tick, and of the threaded Sampler at 1 s and 0.25 s."""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import signal
import socket
import subprocess
import sys
import time

from gpumon.sampling.nvml import GpuCollector
from gpumon.sampling.sampler import Sampler

LOAD = """
import subprocess, sys, time, torch
workers = [
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    for _ in range(4)
]
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


def tick_costs(fast: int, slow: int, pause: float, profile: int = 0) -> None:
    """The mean CPU of a fast and a slow tick; with `profile`, then each tier's `profile` top functions (cProfile,
    own time, over the same number of ticks again)."""
    sampler = Sampler()
    started = time.process_time()
    sampler.sample_once(window=0.1)  # opens NVML, primes every counter
    print(
        f"first sample (NVML opened, every GPU's handle and static fields, every counter primed): "
        f"{time.process_time() - started:.3f} s CPU"
    )

    def fast_ticks() -> None:
        for _ in range(fast):
            sampler.history.add(sampler._build_snapshot())
            time.sleep(pause)

    def slow_ticks() -> None:
        for _ in range(slow):
            sampler._collect_slow()
            time.sleep(pause)

    started = time.process_time()
    fast_ticks()
    fast_cost = (time.process_time() - started) / fast
    started = time.process_time()
    slow_ticks()
    slow_cost = (time.process_time() - started) / slow
    for name, ticks, count in (("fast", fast_ticks, fast), ("slow", slow_ticks, slow)):
        if profile:
            profiler = cProfile.Profile(time.process_time)
            profiler.runcall(ticks)
            print(f"{name} tier, top {profile} functions by own CPU time over {count} ticks (cProfile inflates it):")
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(profile)
    snapshot = sampler._build_snapshot()
    sampler.stop()
    gpm = [gpu.has_gpm for gpu in snapshot.gpus]
    print(f"GPUs: {len(snapshot.gpus)} ({snapshot.gpu_error or 'NVML ok'}); GPM: {gpm}")
    print(f"GPU processes: {len(snapshot.processes)}, with {sum(len(p.children) for p in snapshot.processes)} children")
    print(f"fast tick: {fast_cost * 1e6:8.0f} us CPU (mean of {fast})")
    print(f"slow tick: {slow_cost * 1e6:8.0f} us CPU (mean of {slow})")


def call_costs(reps: int) -> None:
    """CPU per call of each NVML query the tiers make, and of the host and process collectors, on GPU 0."""
    sampler = Sampler()
    snapshot = sampler.sample_once(window=0.1)
    gpu = sampler.gpu
    devices = list(gpu._devices)
    if not devices:
        print(f"no GPU: {snapshot.gpu_error}")
        sampler.stop()
        return
    nvml, device = gpu._nvml, devices[0]
    graphics = GpuCollector(graphics_activity=True)  # as `exporter --dcgm-names` and `record` read GPM
    graphics.collect_fast()
    graphics_device = graphics._devices[0]
    handle = device.handle
    calls = {
        "UtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
        "MemoryInfo": (lambda: nvml.nvmlDeviceGetMemoryInfo(handle, device.memory_version))
        if device.memory_version
        else (lambda: nvml.nvmlDeviceGetMemoryInfo(handle)),
        "PowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(handle),
        "ClockInfo x2": lambda: (
            nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
        ),
        "gpm reading (SampleGet + MetricsGet)": lambda: (
            setattr(device, "gpm_previous_time", -1e9),
            gpu._gpm_reading(device),
        ),
        "gpm reading + graphics_activity": lambda: (
            setattr(graphics_device, "gpm_previous_time", -1e9),
            graphics._gpm_reading(graphics_device),
        ),
        "Temperature": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
        "CurrentClocksEventReasons": lambda: gpu._slow_fields(device),
        "TotalEnergyConsumption": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
        "FieldValues(TOTAL_ENERGY_CONSUMPTION)": lambda: nvml.nvmlDeviceGetFieldValues(
            handle, [getattr(nvml, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 83)]
        ),
        "health read (every 10 s, all its calls)": lambda: gpu._health_fields(device),
        "ComputeRunningProcesses": lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle),
        "GraphicsRunningProcesses": lambda: nvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
        "ProcessUtilization": lambda: gpu._process_utilization(device),
        "processes (all of the above three)": lambda: gpu._processes(device),
        "collect_fast (all GPUs)": gpu.collect_fast,
        "host.collect": sampler.host.collect,
        "processes.collect (GPU processes + children)": lambda: sampler.processes.collect(
            [p for d in devices for p in gpu._processes(d)]
        ),
    }
    print(f"CPU per call, mean of {reps} ({device.name}):")
    for name, call in calls.items():
        try:
            call()
        except Exception as error:  # noqa: BLE001 - report and go on
            print(f"  {name:<46} failed: {error}")
            continue
        started = time.process_time()
        for _ in range(reps):
            call()
            time.sleep(0.001)
        print(f"  {name:<46} {(time.process_time() - started) / reps * 1e6:8.0f} us")
    sampler.stop()


def threaded_cost(interval: float, seconds: float) -> float:
    sampler = Sampler(interval=interval)
    delivered = []
    started_cpu, started_wall = time.process_time(), time.monotonic()
    sampler.start(delivered.append)
    time.sleep(seconds)
    sampler.stop()
    cpu, wall = time.process_time() - started_cpu, time.monotonic() - started_wall
    print(
        f"threaded Sampler at {interval:g} s: {100 * cpu / wall:5.2f}% of one core over {wall:.1f} s, "
        f"{len(delivered)} snapshots"
    )
    return cpu / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fast", type=int, default=100)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument(
        "--pause", type=float, default=0.01, help="seconds between ticks, so rates have something to measure"
    )
    parser.add_argument(
        "--threaded", type=float, default=0.0, help="also run the threaded Sampler this many seconds per interval"
    )
    parser.add_argument("--calls", type=int, default=0, help="also time each NVML query and collector this many times")
    parser.add_argument("--profile", type=int, default=0, help="also print each tier's top N functions (cProfile)")
    parser.add_argument("--load", action="store_true", help="run a bf16 matmul load with 4 worker children meanwhile")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"{socket.gethostname()} {platform.platform()} python {platform.python_version()} {started}")
    load = None
    if args.load:
        load = subprocess.Popen([sys.executable, "-c", LOAD], stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert load.stdout is not None and load.stdout.readline().strip() == "ready"
    try:
        tick_costs(args.fast, args.slow, args.pause, args.profile)
        if args.calls:
            call_costs(args.calls)
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
