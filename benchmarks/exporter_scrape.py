"""`gpumon exporter`'s scrape latency and CPU cost with 8 simulated GPUs and 50 GPU processes.

Usage (from the project root; no GPU needed):

    python benchmarks/exporter_scrape.py
    python benchmarks/exporter_scrape.py --scrapes 500 --window 120 --json exporter_scrape.json

A synthetic recording (built with the real Snapshot dataclasses: 8 GPUs with every field, GPM included, and 50
processes spread over them, one snapshot a second) is replayed by a real `gpumon exporter --replay` child
process, so it posts a new snapshot every second as the live sampler's fast tier would (the live sampler's own
NVML and psutil cost is not in this figure: see benchmarks/sampler_tick_cost.py).

Scrape latency: --scrapes GETs of /metrics one after another over HTTP (a new connection each), median, p99, max.
CPU: the exporter process's user + system CPU time (psutil) over --window seconds while it is scraped every
--scrape-interval seconds (15, Prometheus' usual), the first --settle seconds after its start left out; given
as percent of one core. Targets: scrape under 50 ms, under 1% of a core.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil

from gpumon.sampling.recording import RecordingWriter
from gpumon.sampling.snapshot import CpuSample, GpuSample, ProcessSample, Snapshot

GPUS = 8
PROCESSES = 50
GIB = 1 << 30


def synthetic_snapshot(timestamp: float, tick: int) -> Snapshot:
    """One sample of a busy 8-GPU node: every GPU field set, 50 processes with long command lines."""
    wave = tick % 10
    gpus = tuple(
        GpuSample(
            index=index,
            uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000",
            name="NVIDIA H100 80GB HBM3",
            utilization_gpu=40.0 + wave + index,
            utilization_memory=20.0 + wave,
            memory_used=(20 + index) * GIB,
            memory_total=80 * GIB,
            temperature=40.0 + index,
            power=300.0 + 10 * wave,
            power_limit=700.0,
            clock_sm=1980,
            clock_memory=2619,
            throttle_reasons=("sw_power_cap",) if wave > 7 else (),
            pcie_rx=1.1e9 + wave * 1e7,
            pcie_tx=7e7,
            sm_activity=33.0 + wave,
            sm_occupancy=20.0,
            tensor_activity=4.0,
            dram_bandwidth=24.0,
            clock_sm_max=1980,
            fan_speed=None,
            energy_total=1.0e9 + tick * 300.0,
            nvlink_rx=5e9,
            nvlink_tx=5e9,
            ecc_corrected_volatile=0,
            ecc_uncorrected_volatile=0,
            ecc_corrected_aggregate=3,
            ecc_uncorrected_aggregate=0,
            remapped_rows_correctable=0,
            remapped_rows_uncorrectable=0,
            remapped_rows_pending=False,
            remapped_rows_failed=False,
            mig_mode=False,
            xid_events=(),
        )
        for index in range(GPUS)
    )
    processes = tuple(
        ProcessSample(
            pid=10_000 + number,
            ppid=1,
            user="trainer",
            command=f"/usr/bin/python3 /home/trainer/jobs/run-{number}/train.py --config conf/{number}.yaml "
            f"--wandb-key 0123456789abcdef --lr 0.001",
            gpu_indices=(number % GPUS,),
            gpu_memory=(1 + number % 4) * GIB,
            sm_percent=float(10 + wave),
            cpu_percent=95.0 + wave,
            rss=(2 + number % 3) * GIB,
            state="running",
        )
        for number in range(PROCESSES)
    )
    return Snapshot(
        timestamp=timestamp,
        gpus=gpus,
        driver_version="580.159.04",
        hostname="bench-node",
        cpu=CpuSample(per_core=(50.0,) * 16, total=50.0, memory_used=64 * GIB, memory_total=128 * GIB),
        processes=processes,
    )


def write_recording(path: Path, seconds: int) -> None:
    start = time.time() - seconds
    with path.open("w", encoding="utf-8") as stream:
        writer = RecordingWriter(stream, note="benchmarks/exporter_scrape.py synthetic node")
        for tick in range(seconds):
            writer.write(synthetic_snapshot(start + tick, tick))


def scrape(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read()
    return time.perf_counter() - started, len(body)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scrapes", type=int, default=300, help="scrapes for the latency figures")
    parser.add_argument("--window", type=float, default=120.0, help="seconds the CPU is measured over")
    parser.add_argument("--settle", type=float, default=8.0, help="seconds after the start left out of the CPU")
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpumon-exporter-bench-") as directory:
        recording = Path(directory) / "node.jsonl"
        write_recording(recording, seconds=int(args.settle + args.window + args.scrapes * 0.05 + 60))
        command = [
            sys.executable,
            "-m",
            "gpumon",
            "exporter",
            "--replay",
            str(recording),
            "--listen",
            "127.0.0.1:0",
            "--host-label",
            "bench-node",
            "--no-jobs",
        ]
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            started = time.monotonic()
            line = proc.stdout.readline()
            if not line.startswith("gpumon exporter: serving "):
                raise SystemExit(f"exporter did not start: {line!r}")
            url = line.split()[3]
            process = psutil.Process(proc.pid)
            time.sleep(1.5)  # the first replayed snapshot is in
            latencies: list[float] = []
            size = 0
            for _ in range(args.scrapes):
                seconds, size = scrape(url)
                latencies.append(seconds)
            body = urllib.request.urlopen(url, timeout=10).read().decode()
            series = sum(1 for row in body.splitlines() if row and not row.startswith("#"))
            time.sleep(max(0.0, started + args.settle - time.monotonic()))
            time.sleep(max(0.0, args.scrape_interval - (time.monotonic() - started)))  # quiet after the burst
            cpu_start, wall_start = sum(process.cpu_times()[:2]), time.monotonic()
            next_scrape = wall_start
            cpu_scrapes = 0
            while time.monotonic() - wall_start < args.window:
                if time.monotonic() >= next_scrape:
                    scrape(url)
                    cpu_scrapes += 1
                    next_scrape += args.scrape_interval
                time.sleep(min(0.5, max(0.0, next_scrape - time.monotonic())))
            cpu_seconds = sum(process.cpu_times()[:2]) - cpu_start
            wall = time.monotonic() - wall_start
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "gpus": GPUS,
        "processes": PROCESSES,
        "series": series,
        "bytes": size,
        "scrapes": args.scrapes,
        "scrape_median_ms": round(statistics.median(latencies) * 1000, 2),
        "scrape_p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "scrape_max_ms": round(max(latencies) * 1000, 2),
        "cpu_window_s": round(wall, 1),
        "cpu_window_scrapes": cpu_scrapes,
        "cpu_percent_of_one_core": round(100 * cpu_seconds / wall, 3),
    }
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    met = result["scrape_p99_ms"] < 50 and result["cpu_percent_of_one_core"] < 1.0
    print("targets (scrape < 50 ms, < 1% of a core):", "met" if met else "NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
