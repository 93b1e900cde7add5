"""Steps/s of a hooked training job while its hook's socket is flooded with connections, against quiet windows.

Usage (from the project root; on CUDA when available, else CPU):

    python benchmarks/hook_flood.py --json hook_flood.json
    python benchmarks/hook_flood.py --rates 0 100 300 1000 --rounds 5 --window 4 --device cpu

One job runs for the whole benchmark (steady state: it never stops between windows) with `import gpumon.hook`;
it prints (unix time, steps so far) ten times a second. Each round goes through the flood rates; for each rate
a quiet window and then a flood window follow each other: a separate process opens and closes that many
connections a second on the job's socket (non-blocking connects: a connect the kernel refuses because the hook
is not accepting counts as made). The first --settle seconds of each window are not counted.

Reported per rate: the job's median steps/s, and its loss against the quiet windows as the median of the paired
ratios (each flood window against the mean of the quiet windows before and after it, so slow drifts cancel),
with the worst ratio; the CPU the job's non-training threads (the hook's server) used, per second, above quiet;
and what the flooder managed (connects a second, and how many were accepted by the kernel). Target: a flood of
1,000 connections/s costs the job at most 2% of its steps/s. Rate 0 is the quiet windows themselves.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import os, sys, threading, time
import gpumon.hook  # the line a user adds
import torch
from torch.utils.data import DataLoader, TensorDataset

device = sys.argv[1]
width, depth, batch = (1024, 8, 64) if device == "cuda" else (64, 8, 16)
torch.manual_seed(0)
layers = []
for _ in range(depth):
    layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(batch * 64, width), torch.randn(batch * 64, width))
loader = DataLoader(data, batch_size=batch)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
steps, next_report = 0, time.monotonic()
while True:
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        steps += 1
        if time.monotonic() >= next_report:
            next_report += 0.1
            print(time.time(), steps, flush=True)
"""


def flood(path: str, rate: float, seconds: float) -> None:
    """The flooder (run as `hook_flood.py --flood PATH RATE SECONDS`): prints `attempts connected` at the end."""
    start, attempts, connected = time.monotonic(), 0, 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while attempts < due:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(path)
                connected += 1
            except OSError:
                pass
            sock.close()
            attempts += 1
        time.sleep(0.002)
    print(attempts, connected)


class Job:
    """The hooked training job, and the (time, steps) marks it prints."""

    def __init__(self, device: str) -> None:
        self.sock_dir = tempfile.mkdtemp(prefix="gpumon-flood-", dir="/tmp")
        env = dict(
            os.environ,
            GPUMON_SOCKET_DIR=os.path.join(self.sock_dir, "s"),
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p),
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, device], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.path = os.path.join(self.sock_dir, "s", f"{self.proc.pid}.sock")
        self.marks: list[tuple[float, int]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t, steps = line.split()
            self.marks.append((float(t), int(steps)))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not (os.path.exists(self.path) and len(self.marks) > 10):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the job did not start (rc={self.proc.poll()})")
            time.sleep(0.1)

    def steps_at(self, t: float) -> float:
        """Steps done by unix time t, interpolated between the marks around it."""
        marks = list(self.marks)
        for (t0, s0), (t1, s1) in itertools.pairwise(marks):
            if t0 <= t <= t1:
                return s0 + (s1 - s0) * (t - t0) / (t1 - t0) if t1 > t0 else float(s0)
        raise ValueError(f"no marks around {t}")

    def rate(self, start: float, end: float) -> float:
        return (self.steps_at(end) - self.steps_at(start)) / (end - start)

    def side_threads_cpu_s(self) -> float:
        """CPU seconds used so far by the job's threads other than the main (training) one."""
        pid, ticks = self.proc.pid, 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            if int(tid) == pid:
                continue
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stream:
                    fields = stream.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


def window(job: Job, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    flooder = None
    if rate > 0:
        flooder = subprocess.Popen(
            [sys.executable, __file__, "--flood", job.path, str(rate), str(args.window)],
            stdout=subprocess.PIPE,
            text=True,
        )
    start, cpu0 = time.time(), job.side_threads_cpu_s()
    time.sleep(args.window)
    attempts = connected = 0
    if flooder is not None:
        attempts, connected = (int(n) for n in flooder.communicate(timeout=30)[0].split())
    cpu = job.side_threads_cpu_s() - cpu0
    time.sleep(0.3)  # the marks after the window's end
    return {
        "rate": rate,
        "steps_per_s": job.rate(start + args.settle, start + args.window),
        "side_cpu_per_s": cpu / args.window,
        "attempts_per_s": attempts / args.window,
        "connected_per_s": connected / args.window,
    }


def summarize(windows: list[dict[str, Any]], rates: list[float]) -> list[dict[str, Any]]:
    quiet = [w for w in windows if w["rate"] == 0]
    rows = []
    for rate in rates:
        if rate == 0:
            rows.append(
                {
                    "rate": 0,
                    "steps_per_s": statistics.median(w["steps_per_s"] for w in quiet),
                    "loss_pct": 0.0,
                    "worst_loss_pct": 0.0,
                    "extra_cpu_pct": 0.0,
                    "attempts_per_s": 0.0,
                    "connected_per_s": 0.0,
                    "windows": len(quiet),
                }
            )
            continue
        ratios, extra_cpu = [], []
        for index, w in enumerate(windows):
            if w["rate"] != rate:
                continue
            around = [windows[i] for i in (index - 1, index + 1) if 0 <= i < len(windows) and windows[i]["rate"] == 0]
            ratios.append(w["steps_per_s"] / statistics.mean(q["steps_per_s"] for q in around))
            extra_cpu.append(w["side_cpu_per_s"] - statistics.mean(q["side_cpu_per_s"] for q in around))
        flooded = [w for w in windows if w["rate"] == rate]
        rows.append(
            {
                "rate": rate,
                "steps_per_s": statistics.median(w["steps_per_s"] for w in flooded),
                "loss_pct": 100 * (1 - statistics.median(ratios)),
                "worst_loss_pct": 100 * (1 - min(ratios)),
                "extra_cpu_pct": 100 * statistics.median(extra_cpu),
                "attempts_per_s": statistics.median(w["attempts_per_s"] for w in flooded),
                "connected_per_s": statistics.median(w["connected_per_s"] for w in flooded),
                "windows": len(flooded),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates",
        type=float,
        nargs="+",
        default=[0, 100, 300, 1000],
        help="connections a second (0: the quiet windows)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per window")
    parser.add_argument("--settle", type=float, default=0.5, help="seconds at a window's start not counted")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--json", type=Path, help="write the windows and the summary here")
    parser.add_argument("--flood", nargs=3, metavar=("PATH", "RATE", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        flood(args.flood[0], float(args.flood[1]), float(args.flood[2]))
        return
    if args.rounds < 3 or args.window <= args.settle:
        parser.error("--rounds must be at least 3 and --window longer than --settle")
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    job = Job(device)
    try:
        job.wait_ready()
        time.sleep(2.0)  # warm up
        windows: list[dict[str, Any]] = []
        flood_rates = [rate for rate in args.rates if rate > 0]
        for round_index in range(args.rounds):
            order = flood_rates[round_index % len(flood_rates) :] + flood_rates[: round_index % len(flood_rates)]
            for rate in order:
                windows.append(window(job, 0, args))
                windows.append(window(job, rate, args))
                print(
                    f"round {round_index + 1}: {rate:g}/s  quiet {windows[-2]['steps_per_s']:.1f}  "
                    f"flood {windows[-1]['steps_per_s']:.1f} steps/s",
                    file=sys.stderr,
                )
        windows.append(window(job, 0, args))
    finally:
        job.close()
    rows = summarize(windows, sorted(set(args.rates) | {0}))
    print(
        f"{'conn/s':>8} {'steps/s':>9} {'loss %':>7} {'worst %':>8} {'hook CPU %':>11} {'made/s':>8} {'accepted/s':>11}"
    )
    for row in rows:
        print(
            f"{row['rate']:>8g} {row['steps_per_s']:>9.1f} {row['loss_pct']:>7.2f} {row['worst_loss_pct']:>8.2f} "
            f"{row['extra_cpu_pct']:>11.2f} {row['attempts_per_s']:>8.0f} {row['connected_per_s']:>11.0f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "hook_flood",
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "host": platform.node(),
                    "device": device,
                    "python": platform.python_version(),
                    "args": {k: v for k, v in vars(args).items() if k not in ("json", "flood")},
                    "summary": rows,
                    "windows": windows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
