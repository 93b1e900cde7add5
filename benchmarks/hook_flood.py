"""Steps/s of a hooked training job while clients flood its hook's socket, against quiet windows in the same run.

Usage (from the project root; on CUDA when available, else CPU):

    python benchmarks/hook_flood.py --json hook_flood.json
    python benchmarks/hook_flood.py --floods connect:1000 get_state --rounds 5 --window 4 --device cpu
    python benchmarks/hook_flood.py --device cuda --json ...
    python benchmarks/hook_flood.py --device cpu --job python --pin --trees before=/tmp/old after=. --rounds 5

One job runs for the whole benchmark (steady state: it never stops between windows) with `import gpumon.hook`: on
the CPU a launch-bound-like loop (a small MLP, batch 16; every torch call gives the GIL up and takes it back), on
CUDA a 1024-wide one; `--job python`, a GIL-bound loop instead (about 1 ms of pure Python a step, marked with
`gpumon.hook.step()`: it never gives the GIL up by itself, so it shows what the hook's GIL handoffs cost most
plainly). Ten times a second it prints the unix time, its steps so far, the hook's server thread's CPU seconds,
voluntary and involuntary context switches (/proc/self/task/TID/status) and the server's own counts of wakeups and
GIL handoffs (where the hook counts them), and the training thread's own CPU seconds (`time.thread_time()`) and
context switches. Each round goes through the floods; for each a quiet window and then a flood window follow each
other, the flood made by a separate process. The first --settle seconds of each window are not counted.

`--trees` runs one job per source tree (the gpumon each imports: say the code before a change and after it) and
takes them in turn, each flood's pair of windows on one and then on the other, the one not measured stopped with
SIGSTOP: before and after interleaved within seconds, under the same load. `--pin` puts the training thread alone
on the first CPU and everything else (the job's other threads, the flooder, this script) on the others, so that on
a machine with few cores the flooder takes no CPU from the training thread; `--flood-nice` runs the flooder niced.
Floods (`NAME` or `NAME:RATE`):

- `connect:R`: R connections opened and closed a second (non-blocking connects; a refused one counts as made).
- `resubscribe[:R]`: one client re-sending `{"type":"subscribe","backlog":4096}`, as fast as the hook reads, or R a
  second.
- `get_state`: 8 clients sending `get_state` as fast as the hook reads.
- `subscribers`: 8 clients subscribed at the fastest rates (`steps` every 0.05 s, `state` every 0.25 s), reading.
- `huge_ids`: 8 clients sending `get_state` with a 60 KB `id` (a list of 15,000 `[1]`, costly to parse).
- `nan_ids`: 8 clients sending `get_state` with `"id":NaN`, reconnecting when closed.
- `dashboard`: not a flood: one client subscribed as the dashboard is (`steps` every 0.2 s, `state` every 1 s), reading
  every 20 ms; what a legitimate monitor costs.
- `handoffs:R`: no client; a thread in the job wakes up R times a second (a `select` on a pipe that never becomes
  readable) and does nothing else: what a GIL handoff alone costs the training thread, to set against the floods.

Reported per tree and flood: the job's median steps/s, and its loss against the quiet windows as the median of the
paired ratios (each flood window against the mean of the quiet windows before and after it, so slow drifts cancel),
with their range; the training thread's lost time (wall time minus its own CPU time, ms a second: waiting for the
GIL, or for a core), and beyond the quiet windows' (paired the same way): that lost time, its waits (voluntary
switches: in the GIL-bound loop, nearly all waits for the GIL), its preemptions (involuntary switches: the machine's
other load) and its CPU a step (flat if the training thread does no work for the clients); the hook's server
thread's CPU (% of a core), its waits, and its own counts of wakeups and GIL handoffs a second; and what the flooder
managed (connections or request lines a second, bytes read a second). The counts are the robust figures on a
shared machine; the lost time and steps/s carry its noise. Target: no flood costs the job more than 2% of its
steps/s; the server thread stays within its budget (1.5% of a core, CPU and handoffs).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import shutil
import signal
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
import os, select, sys, threading, time
import gpumon.hook  # the line a user adds
from gpumon.hook import lifecycle
import torch
from torch.utils.data import DataLoader, TensorDataset

device, kind = sys.argv[1], sys.argv[2]
width, depth, batch = (1024, 8, 64) if device == "cuda" else (64, 8, 16)
PY_STEP = 15_000  # a pure-Python step's loop: about 1 ms on the VM, the GIL held throughout


def server_thread():
    for thread in threading.enumerate():
        if thread.name == "gpumon-hook-server" and thread.ident is not None:
            return thread
    return None


def switches(tid):  # (voluntary, involuntary) context switches of one thread: its waits (the GIL's among them), and
    try:            # the times the kernel took its core away. os.open/read/close: three calls, not open()'s six
        fd = os.open(f"/proc/self/task/{tid}/status", os.O_RDONLY)
        try:
            text = os.read(fd, 8192).decode()
        finally:
            os.close(fd)
        fields = dict(line.split(":", 1) for line in text.splitlines() if "ctxt_switches" in line)
        return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])
    except (OSError, KeyError, ValueError):
        return 0, 0


main_tid = threading.get_native_id()
pin = os.environ.get("GPUMON_FLOOD_PIN")  # "TRAIN:OTHERS": the training thread on one CPU, every other thread on others
if pin:
    train_cpus, other_cpus = ({int(cpu) for cpu in part.split(",")} for part in pin.split(":"))
    os.sched_setaffinity(0, train_cpus)  # this thread; the threads it starts inherit it until pinned below
pinned = {main_tid}


def pin_others():
    for tid in map(int, os.listdir("/proc/self/task")):
        if tid not in pinned:
            pinned.add(tid)
            try:
                os.sched_setaffinity(tid, other_cpus)
            except OSError:
                pass


def report(steps):
    # unix time, steps, then the server thread's CPU s, voluntary and involuntary switches and its own counts of
    # wakeups and GIL handoffs (-1: a hook that does not count them), then the training thread's CPU s and switches
    thread = server_thread()
    cpu, sv, si, wakeups, handoffs = 0.0, 0, 0, -1, -1
    if thread is not None:
        try:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:
            pass
        sv, si = switches(thread.native_id)
        wakeups = getattr(lifecycle.server(), "wakeups", -1)
        handoffs = getattr(lifecycle.server(), "handoffs", -1)
    tv, ti = switches(main_tid)
    if pin:
        pin_others()
    fields = (time.time(), steps, cpu, sv, si, wakeups, handoffs, time.thread_time(), tv, ti)
    os.write(1, (" ".join(map(str, fields)) + "\n").encode())  # one write (print writes each field)


wake_rate = 0.0


def waker():  # `handoffs:R`: a thread that wakes R times a second and does nothing else: the GIL handoffs alone
    r, _w = os.pipe()
    while True:
        rate = wake_rate
        if rate <= 0:
            time.sleep(0.05)
            continue
        select.select([r], [], [], 1 / rate)


def commands():  # stdin: "handoffs R" lines; EOF: exit
    global wake_rate
    for line in sys.stdin:
        wake_rate = float(line.split()[1])
    os._exit(0)


threading.Thread(target=commands, daemon=True).start()
threading.Thread(target=waker, daemon=True).start()
steps, next_report = 0, time.monotonic()
if kind == "python":  # a GIL-bound loop: every step pure Python, marked with gpumon.hook.step()
    while True:
        total = 0
        for i in range(PY_STEP):
            total += i * i
        gpumon.hook.step()
        steps += 1
        if time.monotonic() >= next_report:
            next_report += 0.1
            report(steps)
torch.manual_seed(0)
layers = []
for _ in range(depth):
    layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
data = TensorDataset(torch.randn(batch * 64, width), torch.randn(batch * 64, width))
loader = DataLoader(data, batch_size=batch)
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
            report(steps)
"""


REQUEST_CLIENTS = 8
HUGE_ID = [[1]] * 15_000
REQUESTS = {
    "resubscribe": b'{"type":"subscribe","backlog":4096}\n',
    "get_state": b'{"type":"get_state","id":1}\n',
    "subscribers": b'{"type":"subscribe","steps_interval":0.05,"state_interval":0.25}\n',
    "dashboard": b'{"type":"subscribe","steps_interval":0.2,"state_interval":1.0}\n',
    "huge_ids": json.dumps({"type": "get_state", "id": HUGE_ID}, separators=(",", ":")).encode() + b"\n",
    "nan_ids": b'{"type":"get_state","id":NaN}\n',
}
FLOOD_NAMES = ["connect", "handoffs", *REQUESTS]
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
    count = 1 if name in ("resubscribe", "dashboard") else REQUEST_CLIENTS
    clients = [FloodClient(path, REQUESTS[name], rate) for _ in range(count)]
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        for client in clients:
            client.step(now, once=name in ("subscribers", "dashboard"))
        time.sleep(0.001 if name != "dashboard" else 0.02)
    return sum(c.sent_lines for c in clients), sum(c.received for c in clients)


def flood(path: str, spec: str, seconds: float) -> None:
    """The flooder (run as `hook_flood.py --flood PATH SPEC SECONDS`): prints `sent received` at the end."""
    name, _, rate = spec.partition(":")
    if name == "connect":
        print(*connect_flood(path, float(rate), seconds))
    else:
        print(*request_flood(path, name, float(rate or 0), seconds))


FIELDS = (
    "steps",
    "server_cpu",
    "server_waits",
    "server_preempted",
    "wakeups",
    "handoffs",
    "train_cpu",
    "train_waits",
    "train_preempted",
)
"""What the job prints after the unix time, ten times a second (see WORKER's `report`)."""


class Job:
    """The hooked training job, and the marks it prints (unix time, then FIELDS)."""

    def __init__(self, device: str, kind: str, tree: Path, label: str, pin: str | None = None) -> None:
        self.label = label
        self.sock_dir = tempfile.mkdtemp(prefix="gpumon-flood-", dir="/tmp")
        env = dict(
            os.environ,
            GPUMON_SOCKET_DIR=os.path.join(self.sock_dir, "s"),
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(p for p in [str(tree), os.environ.get("PYTHONPATH", "")] if p),
        )
        if pin:
            env["GPUMON_FLOOD_PIN"] = pin
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, device, kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=self.sock_dir,  # not the project root: the job imports gpumon from `tree` only
        )
        self.path = os.path.join(self.sock_dir, "s", f"{self.proc.pid}.sock")
        self.marks: list[tuple[float, ...]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.marks.append(tuple(float(field) for field in line.split()))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not (os.path.exists(self.path) and len(self.marks) > 10):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the job did not start (rc={self.proc.poll()})")
            time.sleep(0.1)

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def pause(self) -> None:
        """Stop the job (SIGSTOP) while another tree's job is measured: it takes no CPU meanwhile."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def at(self, t: float) -> tuple[float, ...]:
        """FIELDS by unix time t, interpolated between the marks around it."""
        marks = list(self.marks)
        for before, after in itertools.pairwise(marks):
            t0, t1 = before[0], after[0]
            if t0 <= t <= t1:
                share = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
                return tuple(a + (b - a) * share for a, b in zip(before[1:], after[1:], strict=True))
        raise ValueError(f"no marks around {t}")

    def rates(self, start: float, end: float) -> dict[str, float]:
        """Each of FIELDS a second between two unix times (CPU seconds a second: a share of a core)."""
        first, last = self.at(start), self.at(end)
        return {name: (b - a) / (end - start) for name, a, b in zip(FIELDS, first, last, strict=True)}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


def window(job: Job, spec: str | None, args: argparse.Namespace) -> dict[str, Any]:
    flooder = None
    name, _, rate = (spec or "").partition(":")
    waking = name == "handoffs"
    if waking:
        job.command(f"handoffs {rate}")
    elif spec is not None:
        command = [sys.executable, __file__, "--flood", job.path, spec, str(args.window)]
        if args.flood_nice:
            command = ["nice", "-n", str(args.flood_nice), *command]
        flooder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    start = time.time()
    time.sleep(args.window)
    sent = received = 0
    if flooder is not None:
        sent, received = (int(n) for n in flooder.communicate(timeout=60)[0].split())
    if waking:
        job.command("handoffs 0")
    time.sleep(0.3)  # the marks after the window's end
    rates = job.rates(start + args.settle, start + args.window)
    counted = job.marks[-1][FIELDS.index("wakeups") + 1] >= 0
    return {
        "tree": job.label,
        "flood": spec,
        "steps_per_s": rates["steps"],
        "server_cpu_pct": 100 * rates["server_cpu"],
        "server_waits_per_s": rates["server_waits"],
        "server_wakeups_per_s": rates["wakeups"] if counted else None,
        "server_handoffs_per_s": rates["handoffs"] if counted else None,
        "train_cpu_pct": 100 * rates["train_cpu"],
        "train_cpu_us_per_step": 1e6 * rates["train_cpu"] / rates["steps"] if rates["steps"] else None,
        "lost_ms_per_s": 1000 * (1 - rates["train_cpu"]),
        "train_waits_per_s": rates["train_waits"],
        "train_preempted_per_s": rates["train_preempted"],
        "sent_per_s": sent / args.window,
        "received_per_s": received / args.window,
    }


PAIRED = ("lost_ms_per_s", "train_waits_per_s", "train_preempted_per_s", "train_cpu_us_per_step", "server_waits_per_s")
"""Figures given as a flood window's excess over the mean of the quiet windows around it."""


def _paired(windows: list[dict[str, Any]], spec: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each of `spec`'s flood windows with the mean of the quiet windows just before and after it (one tree's
    windows, in the order they ran)."""
    pairs = []
    for index, w in enumerate(windows):
        if w["flood"] != spec:
            continue
        neighbours = [windows[i] for i in (index - 1, index + 1) if 0 <= i < len(windows)]
        around = [q for q in neighbours if q["flood"] is None]
        mean = {key: statistics.mean(q[key] for q in around) for key in ("steps_per_s", *PAIRED)}
        pairs.append((w, mean))
    return pairs


def summarize(windows: list[dict[str, Any]], floods: list[str]) -> list[dict[str, Any]]:
    """One row per tree and flood (and one per tree for its quiet windows)."""
    rows = []
    for tree in dict.fromkeys(w["tree"] for w in windows):
        mine = [w for w in windows if w["tree"] == tree]
        quiet = [w for w in mine if w["flood"] is None]
        rows.append(_row(tree, "quiet", quiet, [(w, w) for w in quiet]))
        for spec in floods:
            pairs = _paired(mine, spec)
            rows.append(_row(tree, spec, [w for w, _ in pairs], pairs))
    return rows


T_975 = (
    12.71,
    4.30,
    3.18,
    2.78,
    2.57,
    2.45,
    2.36,
    2.31,
    2.26,
    2.23,
    2.20,
    2.18,
    2.16,
    2.14,
    2.13,
    2.12,
    2.11,
    2.10,
    2.09,
    2.09,
    2.08,
    2.07,
    2.07,
    2.06,
    2.06,
    2.06,
    2.05,
    2.05,
    2.05,
    2.04,
)
"""Student's t, two-sided 95%, for 1..30 degrees of freedom (1.96 beyond)."""


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% confidence interval (infinite with one value)."""
    mean = statistics.mean(values)
    if len(values) < 2:
        return mean, float("inf")
    df = len(values) - 1
    t = T_975[df - 1] if df <= len(T_975) else 1.96
    return mean, t * statistics.stdev(values) / len(values) ** 0.5


def _row(
    tree: str, spec: str, flooded: list[dict[str, Any]], pairs: list[tuple[dict[str, Any], dict[str, Any]]]
) -> dict[str, Any]:
    def median(key: str) -> float | None:
        values = [w[key] for w in flooded if w[key] is not None]
        return statistics.median(values) if values else None

    losses = [100 * (1 - w["steps_per_s"] / q["steps_per_s"]) for w, q in pairs]
    row: dict[str, Any] = {
        "tree": tree,
        "flood": spec,
        "windows": len(flooded),
        "steps_per_s": median("steps_per_s"),
        "loss_pct": statistics.median(losses),
        "loss_pct_range": [min(losses), max(losses)],
        "loss_pct_mean_ci95": list(mean_ci95(losses)),
        "server_cpu_pct": median("server_cpu_pct"),
        "server_wakeups_per_s": median("server_wakeups_per_s"),
        "server_handoffs_per_s": median("server_handoffs_per_s"),
        "train_cpu_pct": median("train_cpu_pct"),
        "sent_per_s": median("sent_per_s"),
        "received_per_s": median("received_per_s"),
    }
    for key in PAIRED:
        excess = [w[key] - q[key] for w, q in pairs]
        row[key] = median(key)
        row[f"{key}_excess"] = statistics.median(excess)
        row[f"{key}_excess_range"] = [min(excess), max(excess)]
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    """The summary: steps/s lost (median, range, and mean with its 95% confidence interval over the flood windows,
    each against the quiet ones around it);
    the training thread's lost time (wall minus its CPU), its waits (voluntary switches: the GIL's) and preemptions
    beyond the quiet windows', and its CPU a step beyond theirs; the server thread's CPU, waits, and its own counts of
    wakeups and GIL handoffs."""
    print(
        f"{'tree':<7} {'flood':<14} {'steps/s':>7} {'lost %':>6} {'(range)':>12} {'mean±95%':>11} "
        f"{'lost ms/s':>9} {'+ms/s':>6} "
        f"{'(range)':>13} {'+waits/s':>8} {'+preempt/s':>10} {'+us/step':>8} {'srv CPU%':>8} {'srv waits/s':>11} "
        f"{'wakeups/s':>9} {'handoffs/s':>10} {'sent/s':>7} {'read KB/s':>9}"
    )

    def count(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    for row in rows:
        low, high = row["loss_pct_range"]
        lost_low, lost_high = row["lost_ms_per_s_excess_range"]
        mean, half = row["loss_pct_mean_ci95"]
        mean_ci = f"{mean:.1f}±{half:.1f}" if half != float("inf") else f"{mean:.1f}"
        print(
            f"{row['tree']:<7} {row['flood']:<14} {row['steps_per_s']:>7.1f} {row['loss_pct']:>6.1f} "
            f"{f'{low:.1f}..{high:.1f}':>12} {mean_ci:>11} "
            f"{row['lost_ms_per_s']:>9.1f} {row['lost_ms_per_s_excess']:>6.1f} "
            f"{f'{lost_low:.1f}..{lost_high:.1f}':>13} {row['train_waits_per_s_excess']:>8.0f} "
            f"{row['train_preempted_per_s_excess']:>10.0f} {row['train_cpu_us_per_step_excess']:>8.1f} "
            f"{row['server_cpu_pct']:>8.2f} {row['server_waits_per_s']:>11.0f} {count(row['server_wakeups_per_s']):>9} "
            f"{count(row['server_handoffs_per_s']):>10} {row['sent_per_s']:>7.0f} {row['received_per_s'] / 1000:>9.1f}"
        )


def flood_spec(text: str) -> str:
    name, _, rate = text.partition(":")
    if name not in FLOOD_NAMES or (name in ("connect", "handoffs") and not rate):
        raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(FLOOD_NAMES)} (connect:RATE), with :RATE")
    if rate:
        try:
            float(rate)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: RATE must be a number") from None
    return text


def tree_spec(text: str) -> tuple[str, Path]:
    label, _, path = text.rpartition("=")
    tree = Path(path).resolve()
    if not (tree / "gpumon" / "hook" / "server.py").is_file():
        raise argparse.ArgumentTypeError(f"{path!r} holds no gpumon/hook/server.py")
    return label or tree.name, tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--floods", type=flood_spec, nargs="+", default=DEFAULT_FLOODS, help="NAME or NAME:RATE")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=3.0, help="seconds per window")
    parser.add_argument("--settle", type=float, default=0.5, help="seconds at a window's start not counted")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--job", choices=["mlp", "python"], default="mlp", help="the training loop: torch's MLP, or pure Python"
    )
    parser.add_argument(
        "--trees",
        type=tree_spec,
        nargs="+",
        default=[("this", ROOT)],
        metavar="[LABEL=]DIR",
        help="source trees whose gpumon the job imports (default: this one); with several, one job each, run in turn",
    )
    parser.add_argument("--flood-nice", type=int, default=0, help="niceness of the flooder process (0: as is)")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the job's training thread alone on CPU 0; its other threads, the flooder and this script on the others "
        "(a machine with few cores: the flooder then takes no CPU from the training thread)",
    )
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
    pin = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs two CPUs")
        os.sched_setaffinity(0, cpus[1:])  # this script and the flooders it starts
        pin = f"{cpus[0]}:{','.join(map(str, cpus[1:]))}"
    jobs = [Job(device, args.job, tree, label, pin) for label, tree in args.trees]
    windows: list[dict[str, Any]] = []
    try:
        for job in jobs:
            job.wait_ready()
        if len(jobs) > 1:
            for job in jobs:
                job.pause()
        for round_index in range(args.rounds):
            shift = round_index % len(args.floods)
            for spec_index, spec in enumerate(args.floods[shift:] + args.floods[:shift]):
                turn = (round_index + spec_index) % len(jobs)  # which tree goes first changes every time
                for job in jobs[turn:] + jobs[:turn]:
                    if len(jobs) > 1:
                        job.resume()
                    if round_index == 0 and spec_index == 0:
                        time.sleep(2.0)  # warm up
                    elif len(jobs) > 1:
                        time.sleep(0.5)  # back from SIGSTOP
                    windows.append(window(job, None, args))
                    windows.append(window(job, spec, args))
                    if len(jobs) > 1:
                        job.pause()
                    quiet, flooded = windows[-2], windows[-1]
                    print(
                        f"round {round_index + 1}: {job.label:<8} {spec:<14} quiet {quiet['steps_per_s']:.1f}  flood "
                        f"{flooded['steps_per_s']:.1f} steps/s; training thread lost {quiet['lost_ms_per_s']:.1f} -> "
                        f"{flooded['lost_ms_per_s']:.1f} ms/s, waits {quiet['train_waits_per_s']:.0f} -> "
                        f"{flooded['train_waits_per_s']:.0f}/s; server thread {flooded['server_cpu_pct']:.2f}% of a "
                        f"core, {flooded['server_waits_per_s']:.0f} waits/s",
                        file=sys.stderr,
                        flush=True,
                    )
        for job in jobs:
            if len(jobs) > 1:
                job.resume()
                time.sleep(0.5)
            windows.append(window(job, None, args))
            if len(jobs) > 1:
                job.pause()
    finally:
        for job in jobs:
            job.close()
    rows = summarize(windows, list(dict.fromkeys(args.floods)))
    print_table(rows)
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
                    "args": {
                        **{k: v for k, v in vars(args).items() if k not in ("json", "flood", "trees")},
                        "trees": {label: str(tree) for label, tree in args.trees},
                    },
                    "summary": _rounded(rows),
                    "windows": _rounded(windows),
                },
                separators=(",", ":"),
            )
        )


def _rounded(value: Any) -> Any:
    """`value` with every float rounded to 3 decimals (the raw figures carry no more)."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


if __name__ == "__main__":
    main()
