"""Attach latency: from `gpumon attach PID` to the job's first step sample on screen (target: under 1 s).

Starts a small hooked CPU training loop (or attaches to --pid), then, --runs times:
  - screen: runs `python -m gpumon attach PID` in a pseudo-terminal and times until the job pane shows the job's
    throughput ("steps/s"), i.e. the first step sample drawn; then quits it with `q`;
  - client: times JobClient start -> first `steps` message with records, in this process (the socket part alone);
  - startup: times `python -m gpumon --version` in the same pseudo-terminal (Python and gpumon's import floor).
Prints each run and the medians, with the machine and date.

    python benchmarks/attach_latency.py [--runs 5] [--pid PID]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import platform
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpumon import protocol
from gpumon.jobs.client import JobClient

JOB = """
import time, torch, gpumon.hook
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,))), batch_size=32, shuffle=True)
end = time.monotonic() + {seconds}
while time.monotonic() < end:
    for x, y in data:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.002)
"""
MARKER = b"steps/s"
COLUMNS, LINES = 120, 40


def run_in_pty(argv: list[str], env: dict[str, str], marker: bytes | None, timeout: float = 20.0) -> float:
    """Seconds from starting argv in a pty until `marker` appears in its output (None: until it exits)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", LINES, COLUMNS, 0, 0))
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, cwd=REPO)
    os.close(slave)
    seen = b""
    found: float | None = None
    try:
        while time.monotonic() - started < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed (the program exited)
                chunk = b""
            if not chunk:
                if marker is None:
                    found = time.monotonic() - started
                break
            seen = (seen + chunk)[-4096:]
            if marker is not None and marker in seen:
                found = time.monotonic() - started
                break
    finally:
        if proc.poll() is None:
            try:
                os.write(master, b"q")
                proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        os.close(master)
    if found is None:
        raise RuntimeError(f"{' '.join(argv)}: no {marker!r} within {timeout} s; last output: {seen[-300:]!r}")
    return found


def client_latency(pid: int) -> float:
    first = threading.Event()
    client = JobClient(pid)
    started = time.monotonic()
    client.start(lambda what: first.set() if what == protocol.STEPS and client.view().steps else None)
    try:
        if not first.wait(10):
            raise RuntimeError("no step sample within 10 s")
        return time.monotonic() - started
    finally:
        client.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pid", type=int, default=None, help="attach to this hooked job instead of starting one")
    args = parser.parse_args()

    sock_dir = None
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(COLUMNS), LINES=str(LINES))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    job = None
    if args.pid is None:
        sock_dir = os.path.join(tempfile.mkdtemp(prefix="gpumon-latency-"), "s")
        env[protocol.SOCKET_DIR_ENV] = sock_dir
        os.environ[protocol.SOCKET_DIR_ENV] = sock_dir
        job = subprocess.Popen(
            [sys.executable, "-c", JOB.format(seconds=30 + 15 * args.runs)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        pid = job.pid
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(sock_dir, f"{pid}.sock")):
            if time.monotonic() > deadline or job.poll() is not None:
                raise SystemExit("the benchmark job did not start its hook")
            time.sleep(0.05)
        time.sleep(1.0)  # training, not starting up
    else:
        pid = args.pid
    gpumon = [sys.executable, "-m", "gpumon"]
    screen, client, startup = [], [], []
    try:
        for run in range(args.runs):
            startup.append(run_in_pty([*gpumon, "--version"], env, marker=None))
            client.append(client_latency(pid))
            screen.append(run_in_pty([*gpumon, "attach", str(pid)], env, MARKER))
            print(
                f"run {run + 1}: screen {screen[-1] * 1e3:7.1f} ms   client {client[-1] * 1e3:6.1f} ms   "
                f"python+gpumon startup {startup[-1] * 1e3:6.1f} ms",
                flush=True,
            )
    finally:
        if job is not None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        if sock_dir is not None:
            shutil.rmtree(os.path.dirname(sock_dir), ignore_errors=True)
    cpu = platform.processor() or platform.machine()
    print(
        f"\n{time.strftime('%Y-%m-%d')} · {platform.node()} · {os.cpu_count()} CPUs ({cpu}) · "
        f"Python {platform.python_version()}"
    )
    print(
        f"gpumon attach -> first step sample on screen: median {statistics.median(screen) * 1e3:.0f} ms "
        f"(min {min(screen) * 1e3:.0f}, max {max(screen) * 1e3:.0f}; target < 1000 ms)"
    )
    print(f"JobClient start -> first step sample:        median {statistics.median(client) * 1e3:.1f} ms")
    print(f"`gpumon --version` in the same terminal:      median {statistics.median(startup) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
