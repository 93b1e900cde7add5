"""Steps/s of a hooked training job while clients flood its hook's socket, against quiet windows in the same run.

Usage (from the project root; on CUDA when available, else CPU):

    python benchmarks/hook_flood.py --json hook_flood.json
    python benchmarks/hook_flood.py --floods connect:1000 get_state --rounds 5 --window 4 --device cpu
    python benchmarks/hook_flood.py --device cuda --json ...

One job runs for the whole benchmark (steady state: it never stops between windows) with `import gpumon.hook`: on
the CPU a launch-bound-like loop (a small MLP, batch 16), on CUDA a 1024-wide one; it prints (unix time, steps so
far, CPU seconds of the hook's server thread) ten times a second. Each round goes through the floods; for each a
quiet window and then a flood window follow each other, the flood made by a separate process. The first --settle
seconds of each window are not counted. Floods (`NAME` or `NAME:RATE`):

- `connect:R`: R connections opened and closed a second (non-blocking connects; a refused one counts as made).
- `resubscribe[:R]`: one client re-sending `{"type":"subscribe","backlog":4096}`, as fast as the hook reads, or R a
  second.
- `get_state`: 8 clients sending `get_state` as fast as the hook reads.
- `subscribers`: 8 clients subscribed at the fastest rates (`steps` every 0.05 s, `state` every 0.25 s), reading.
- `huge_ids`: 8 clients sending `get_state` with a 60 KB `id` (a list of 15,000 `[1]`, costly to parse).
- `nan_ids`: 8 clients sending `get_state` with `"id":NaN`, reconnecting when closed.

Reported per flood: the job's median steps/s, and its loss against the quiet windows as the median of the paired
ratios (each flood window against the mean of the quiet windows before and after it, so slow drifts cancel), with
the worst ratio; the CPU the hook's server thread used (% of a core, median over the flood windows; the quiet
windows' beside it); and what the flooder managed (connections or request lines a second, bytes read a second).
Target: no flood costs the job more than 2% of its steps/s; the server thread stays within 2% of a core (its
budget).
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


def server_cpu_s():  # CPU seconds of the hook's server thread so far (0 before it runs)
    for thread in threading.enumerate():
        if thread.name == "gpumon-hook-server" and thread.ident is not None:
            try:
                return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:
                return 0.0
    return 0.0


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
            print(time.time(), steps, server_cpu_s(), flush=True)
"""


REQUEST_CLIENTS = 8
HUGE_ID = [[1]] * 15_000
REQUESTS = {
    "resubscribe": b'{"type":"subscribe","backlog":4096}\n',
    "get_state": b'{"type":"get_state","id":1}\n',
    "subscribers": b'{"type":"subscribe","steps_interval":0.05,"state_interval":0.25}\n',
    "huge_ids": json.dumps({"type": "get_state", "id": HUGE_ID}, separators=(",", ":")).encode() + b"\n",
    "nan_ids": b'{"type":"get_state","id":NaN}\n',
}
FLOOD_NAMES = ["connect", *REQUESTS]
DEFAULT_FLOODS = ["connect:1000", "resubscribe", "resubscribe:5", "get_state", "subscribers", "huge_ids", "nan_ids"]


def connect_flood(path: str, rate: float, seconds: float) -> tuple[int, int]:
    """Open and close `rate` connections a second; (attempts, connects the kernel took)."""
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
    return attempts, connected


class FloodClient:
    """One flooding connection: sends its line as fast as the hook takes it (or at `rate`), reads everything."""

    def __init__(self, path: str, line: bytes, rate: float) -> None:
        self.path, self.line, self.rate = path, line, rate
        self.payload = line * max(1, 65536 // len(line))
        self.sent_lines = self.received = 0
        self.sock: socket.socket | None = None
        self.pending = b""
        self.next_at = 0.0

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        return sock

    def step(self, now: float, once: bool) -> None:
        if self.sock is None:
            self.sock = self._connect()
            if self.sock is None:
                return
            if once:
                self.pending = self.line
        if once:
            due = b""
        elif self.rate > 0:
            due = self.line if now >= self.next_at else b""
            if due:
                self.next_at = max(self.next_at + 1 / self.rate, now)
        else:
            due = b"" if self.pending else self.payload
        self.pending += due
        try:
            if self.pending:
                sent = self.sock.send(self.pending)
                self.sent_lines += self.pending[:sent].count(b"\n")
                self.pending = self.pending[sent:]
            while chunk := self.sock.recv(1 << 20):
                self.received += len(chunk)
            self._reconnect()  # EOF: the hook closed it (too many errors)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._reconnect()

    def _reconnect(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.pending = None, b""


def request_flood(path: str, name: str, rate: float, seconds: float) -> tuple[int, int]:
    """Flood with requests; (request lines sent, bytes read)."""
    count = 1 if name == "resubscribe" else REQUEST_CLIENTS
    clients = [FloodClient(path, REQUESTS[name], rate) for _ in range(count)]
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        for client in clients:
            client.step(now, once=name == "subscribers")
        time.sleep(0.001)
    return sum(c.sent_lines for c in clients), sum(c.received for c in clients)


def flood(path: str, spec: str, seconds: float) -> None:
    """The flooder (run as `hook_flood.py --flood PATH SPEC SECONDS`): prints `sent received` at the end."""
    name, _, rate = spec.partition(":")
    if name == "connect":
        print(*connect_flood(path, float(rate), seconds))
    else:
        print(*request_flood(path, name, float(rate or 0), seconds))


class Job:
    """The hooked training job, and the (time, steps, server thread CPU) marks it prints."""

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
        self.marks: list[tuple[float, int, float]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            t, steps, server_cpu = line.split()
            self.marks.append((float(t), int(steps), float(server_cpu)))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not (os.path.exists(self.path) and len(self.marks) > 10):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the job did not start (rc={self.proc.poll()})")
            time.sleep(0.1)

    def at(self, t: float) -> tuple[float, float]:
        """Steps done and the server thread's CPU seconds by unix time t, interpolated between the marks around it."""
        marks = list(self.marks)
        for (t0, s0, c0), (t1, s1, c1) in itertools.pairwise(marks):
            if t0 <= t <= t1:
                share = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
                return s0 + (s1 - s0) * share, c0 + (c1 - c0) * share
        raise ValueError(f"no marks around {t}")

    def rates(self, start: float, end: float) -> tuple[float, float]:
        """Steps a second, and the server thread's share of a core, between two unix times."""
        (s0, c0), (s1, c1) = self.at(start), self.at(end)
        return (s1 - s0) / (end - start), (c1 - c0) / (end - start)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


def window(job: Job, spec: str | None, args: argparse.Namespace) -> dict[str, Any]:
    flooder = None
    if spec is not None:
        flooder = subprocess.Popen(
            [sys.executable, __file__, "--flood", job.path, spec, str(args.window)], stdout=subprocess.PIPE, text=True
        )
    start = time.time()
    time.sleep(args.window)
    sent = received = 0
    if flooder is not None:
        sent, received = (int(n) for n in flooder.communicate(timeout=60)[0].split())
    time.sleep(0.3)  # the marks after the window's end
    steps_per_s, server_cpu = job.rates(start + args.settle, start + args.window)
    return {
        "flood": spec,
        "steps_per_s": steps_per_s,
        "server_cpu_pct": 100 * server_cpu,
        "sent_per_s": sent / args.window,
        "received_per_s": received / args.window,
    }


def summarize(windows: list[dict[str, Any]], floods: list[str]) -> list[dict[str, Any]]:
    quiet = [w for w in windows if w["flood"] is None]
    rows = [
        {
            "flood": "quiet",
            "steps_per_s": statistics.median(w["steps_per_s"] for w in quiet),
            "loss_pct": 0.0,
            "worst_loss_pct": 0.0,
            "server_cpu_pct": statistics.median(w["server_cpu_pct"] for w in quiet),
            "quiet_server_cpu_pct": statistics.median(w["server_cpu_pct"] for w in quiet),
            "sent_per_s": 0.0,
            "received_per_s": 0.0,
            "windows": len(quiet),
        }
    ]
    for spec in floods:
        ratios, quiet_cpu = [], []
        for index, w in enumerate(windows):
            if w["flood"] != spec:
                continue
            neighbours = [windows[i] for i in (index - 1, index + 1) if 0 <= i < len(windows)]
            around = [q for q in neighbours if q["flood"] is None]
            ratios.append(w["steps_per_s"] / statistics.mean(q["steps_per_s"] for q in around))
            quiet_cpu.append(statistics.mean(q["server_cpu_pct"] for q in around))
        flooded = [w for w in windows if w["flood"] == spec]
        rows.append(
            {
                "flood": spec,
                "steps_per_s": statistics.median(w["steps_per_s"] for w in flooded),
                "loss_pct": 100 * (1 - statistics.median(ratios)),
                "worst_loss_pct": 100 * (1 - min(ratios)),
                "server_cpu_pct": statistics.median(w["server_cpu_pct"] for w in flooded),
                "quiet_server_cpu_pct": statistics.median(quiet_cpu),
                "sent_per_s": statistics.median(w["sent_per_s"] for w in flooded),
                "received_per_s": statistics.median(w["received_per_s"] for w in flooded),
                "windows": len(flooded),
            }
        )
    return rows


def flood_spec(text: str) -> str:
    name, _, rate = text.partition(":")
    if name not in FLOOD_NAMES or (name == "connect" and not rate):
        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(FLOOD_NAMES)} (connect:RATE), with :RATE")
    if rate:
        try:
            float(rate)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: RATE must be a number") from None
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--floods", type=flood_spec, nargs="+", default=DEFAULT_FLOODS, help="NAME or NAME:RATE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per window")
    parser.add_argument("--settle", type=float, default=0.5, help="seconds at a window's start not counted")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--json", type=Path, help="write the windows and the summary here")
    parser.add_argument("--flood", nargs=3, metavar=("PATH", "SPEC", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        flood(args.flood[0], args.flood[1], float(args.flood[2]))
        return
    if args.rounds < 1 or args.window <= args.settle:
        parser.error("--rounds must be at least 1 and --window longer than --settle")
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    job = Job(device)
    try:
        job.wait_ready()
        time.sleep(2.0)  # warm up
        windows: list[dict[str, Any]] = []
        for round_index in range(args.rounds):
            shift = round_index % len(args.floods)
            for spec in args.floods[shift:] + args.floods[:shift]:
                windows.append(window(job, None, args))
                windows.append(window(job, spec, args))
                print(
                    f"round {round_index + 1}: {spec:<14} quiet {windows[-2]['steps_per_s']:.1f}  flood "
                    f"{windows[-1]['steps_per_s']:.1f} steps/s, server thread {windows[-1]['server_cpu_pct']:.2f}% "
                    f"of a core",
                    file=sys.stderr,
                    flush=True,
                )
        windows.append(window(job, None, args))
    finally:
        job.close()
    rows = summarize(windows, list(dict.fromkeys(args.floods)))
    print(
        f"{'flood':<14} {'steps/s':>9} {'loss %':>7} {'worst %':>8} {'server CPU %':>13} {'(quiet)':>8} "
        f"{'sent/s':>8} {'read KB/s':>10}"
    )
    for row in rows:
        print(
            f"{row['flood']:<14} {row['steps_per_s']:>9.1f} {row['loss_pct']:>7.2f} {row['worst_loss_pct']:>8.2f} "
            f"{row['server_cpu_pct']:>13.2f} {row['quiet_server_cpu_pct']:>8.2f} {row['sent_per_s']:>8.0f} "
            f"{row['received_per_s'] / 1000:>10.1f}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "benchmark": "hook_flood",
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "host": platform.node(),
                    "cpus": os.cpu_count(),
                    "device": device,
                    "python": platform.python_version(),
                    "commit": _commit(),
                    "args": {k: v for k, v in vars(args).items() if k not in ("json", "flood")},
                    "summary": rows,
                    "windows": windows,
                },
                indent=1,
            )
        )


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


if __name__ == "__main__":
    main()
