"""Steps/s of a launch-bound training loop with and without gpumon's hook, alternated in one run.

Usage (from the project root; on CUDA when available, else CPU):

    python benchmarks/hook_overhead.py --rounds 10 --json out.json
    python benchmarks/hook_overhead.py --device cpu --loops tensor --steps 1500
    python benchmarks/hook_overhead.py --in-process --rounds 16     # off/on alternated inside one process
    python benchmarks/hook_overhead.py --in-process --phases --rounds 100 --steps 100 --warmup 40  # where it goes
    python benchmarks/hook_overhead.py --in-process --control --rounds 200 --steps 100 --warmup 40  # hook vs churn
    python benchmarks/hook_overhead.py --device cpu --rounds 6 --windows 40 --steps 100 --cpu 1   # noisy machine

The loop is the most sensitive case for a per-step cost: 40 Linear(64, 64) layers, batch 4, SGD,
so a step is short and made of many small launches. Two loops: `tensor` (one batch reused) and
`dataloader` (batches from a DataLoader, so every hook wrapper runs). Each round starts one fresh
worker process per variant, warms them all up, then runs `--windows` timed windows of `--steps` steps in
each, back to back, in alternating order (the idle workers wait on stdin); each window is one pair:

    off      no `import gpumon.hook`
    off2     the same again, in another process: its "overhead" is the noise floor of the run (A/A)
    hook     `import gpumon.hook` (patches on, server listening, nobody attached)
    client   as `hook`, with this process attached as a client reading the stream all the time
    hook_every_step  (not by default) as `hook`, timing every step with CUDA events
                     (GPUMON_HOOK_GPU_TIMING=1) instead of one fast step in 8
    imports_only     (not by default) the hook's modules imported with GPUMON_HOOK=0: nothing patched,
                     no server; what merely loading them costs
    hook_no_sampler  (not by default) as `hook`, without the stack sampler (GPUMON_HOOK_SAMPLE_HZ=0): with it,
                     the run also reports `hook` against it, paired (what the sampler's thread costs the loop)

Reported per loop and variant: median steps/s over the rounds, spread ((max - min) / median), and the
overhead against `off` as the median of the per-round ratios (paired, so slow drifts cancel) with its 95%
confidence interval (order statistics of the ratios; many short rounds make it narrow on a noisy machine).
Target: at most 1% slower. `--in-process` alternates hook off and on inside one process (uninstall/install)
instead, so the process itself cannot side with a variant. `--micro` instead times the hook's own work per step
in-process (what the four per-step signals cost, with CUDA events on CUDA), which noise does not blur.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("off", "off2", "hook", "client")
EXTRA_VARIANTS = ("hook_every_step", "imports_only", "hook_no_sampler")
LOOPS = ("tensor", "dataloader")


PHASES = ("fetch", "backward", "optimizer_step")


def training_loop(args: argparse.Namespace, phases: dict[str, float] | None = None) -> Callable[[int], None]:
    """The benchmark's launch-bound loop (`args.loop`) on `args.device`: run(steps) trains that many steps.
    With `phases`, it also adds up the host seconds of each phase there (the batch's fetch, backward, optimizer step:
    where the hook's wrappers run; on CUDA the launches, not the GPU work)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(40)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    inputs = torch.randn(4, 64, device=device)
    loader = DataLoader(TensorDataset(torch.randn(max(args.steps, args.warmup) * 4, 64)), batch_size=4)

    def run(steps: int) -> None:
        if args.loop == "tensor":
            batches: Any = (inputs for _ in range(steps))
        else:
            batches = (x.to(device, non_blocking=True) for (x,), _ in zip(loader, range(steps), strict=False))
        for x in batches:
            loss = model(x).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run_timing_phases(steps: int) -> None:
        assert phases is not None
        clock = time.perf_counter
        batches = iter(loader) if args.loop == "dataloader" else None
        for _ in range(steps):
            started = clock()
            x = inputs if batches is None else next(batches)[0].to(device, non_blocking=True)
            fetched = clock()
            loss = model(x).square().mean()
            optimizer.zero_grad(set_to_none=True)
            backward_started = clock()
            loss.backward()
            backward_ended = clock()
            optimizer.step()
            phases["fetch"] += fetched - started
            phases["backward"] += backward_ended - backward_started
            phases["optimizer_step"] += clock() - backward_ended
        if device.type == "cuda":
            torch.cuda.synchronize()

    return run if phases is None else run_timing_phases


def start_idle_thread() -> None:
    """One more thread, idle for good: the process is then multi-threaded with or without the hook, as a CUDA job
    (the driver's threads) or a CPU job with torch's intra-op pool already is. glibc's malloc skips its locks while a
    process has one thread, so without this the hook's server thread is charged for their cost in every malloc."""
    threading.Thread(target=threading.Event().wait, name="idle", daemon=True).start()


def worker(args: argparse.Namespace) -> None:
    """One variant in its own process: warms up, then runs `--steps` timed steps each time the parent
    writes a line on stdin, printing {"event": "result", "steps_per_s": ...} after each."""
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})  # every variant on the same core: no core-to-core differences
    if args.idle_thread:
        start_idle_thread()
    if args.variant in ("hook", "client", "hook_every_step", "hook_no_sampler"):
        import gpumon.hook  # the line a user adds
    elif args.variant == "imports_only":  # the hook's modules loaded, nothing installed (GPUMON_HOOK=0)
        import gpumon.hook
        import gpumon.hook.patches
        import gpumon.hook.runtime
        import gpumon.hook.server  # noqa: F401 - imported to load it, as the hook would
    run = training_loop(args)
    run(args.warmup)
    print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
    for _line in sys.stdin:
        started = time.perf_counter()
        run(args.steps)
        elapsed = time.perf_counter() - started
        print(json.dumps({"event": "result", "steps_per_s": args.steps / elapsed}), flush=True)


def in_process(args: argparse.Namespace, loop: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Steps/s of `loop` in this one process, the hook uninstalled ("off") and installed ("hook") in turn; and steps
    per second of the training thread's own CPU time in the same windows.

    The same process, memory and core for both: what differs between windows is only the hook (its patches,
    its runtime and its idle server thread), not the process it runs in. The CPU-time rate leaves out the time the
    thread was not running (other tenants of a shared machine), which is most of the wall-clock noise there; the
    hook's work runs on that thread, and its server thread would show only in the wall-clock rate.
    """
    import gpumon.hook

    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.idle_thread:
        start_idle_thread()
    phases = dict.fromkeys(PHASES, 0.0) if args.phases else None
    run = training_loop(argparse.Namespace(**{**vars(args), "loop": loop}), phases)
    variants = ("off", "hook", "churn") if args.control else ("off", "hook")
    rates: dict[str, list[float]] = {variant: [] for variant in variants}
    cpu_rates: dict[str, list[float]] = {variant: [] for variant in variants}
    for round_index in range(args.rounds):
        turn = round_index % len(variants)
        order = variants[turn:] + variants[:turn]
        for variant in order if round_index % 2 == 0 else reversed(order):
            if variant == "off":
                gpumon.hook.uninstall()
            else:
                gpumon.hook.install(lazy=False)
                if variant == "churn":  # the install's churn before the warm-up, but no hook in the window
                    gpumon.hook.uninstall()
            run(args.warmup)
            if phases is not None:
                phases.update(dict.fromkeys(PHASES, 0.0))
            cpu_before = thread_schedstat()
            cpu_started = time.thread_time()
            started = time.perf_counter()
            run(args.steps)
            rates[variant].append(args.steps / (time.perf_counter() - started))
            cpu_rates[variant].append(args.steps / (time.thread_time() - cpu_started))
            cpu_after = thread_schedstat()
            if phases is not None:
                per_step = {name: seconds / args.steps * 1e6 for name, seconds in phases.items()}
                if cpu_before and cpu_after:  # its ns on CPU move only at ticks and switches: too coarse per window
                    per_step["thread_runs_per_window"] = cpu_after[1] - cpu_before[1]
                for name, value in per_step.items():
                    rates.setdefault(f"{variant}:{name}", []).append(value)
        if (round_index + 1) % max(1, args.rounds // 20) == 0:
            print(
                f"  {loop} round {round_index + 1}/{args.rounds}: "
                + "  ".join(f"{v} {rates[v][-1]:.1f}" for v in rates),
                file=sys.stderr,
                flush=True,
            )
    gpumon.hook.uninstall()
    return rates, cpu_rates


def thread_schedstat() -> tuple[int, int] | None:
    """(ns on CPU, times scheduled) of the calling thread, from /proc (Linux); None elsewhere."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as stat:
            fields = stat.read().split()
        return int(fields[0]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def summarize_phases(rates: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per phase (and the training thread's runs): medians off and on, the median paired difference with its 95%
    confidence interval; and the same for fetch + optimizer step together, the two phases where the hook runs at
    every step once an optimizer marks them."""
    rates = dict(rates)
    for variant in ("off", "hook"):
        fetch, step = rates.get(f"{variant}:fetch", []), rates.get(f"{variant}:optimizer_step", [])
        if fetch and len(fetch) == len(step):
            rates[f"{variant}:fetch_and_optimizer_step"] = [a + b for a, b in zip(fetch, step, strict=True)]
    out: dict[str, dict[str, Any]] = {}
    for key in [k.split(":", 1)[1] for k in rates if k.startswith("off:")]:
        off, hook = rates[f"off:{key}"], rates.get(f"hook:{key}", [])
        if not off or len(off) != len(hook):
            continue
        differences = [h - o for h, o in zip(hook, off, strict=True)]
        out[key] = {
            "off": statistics.median(off),
            "hook": statistics.median(hook),
            "paired_difference": statistics.median(differences),
            "paired_difference_ci95": list(median_interval(differences)),
        }
    return out


def micro(args: argparse.Namespace) -> dict[str, float]:
    """The hook's own work per training step, timed directly: what the signals of one step cost as the patched
    functions send them (the DataLoader fetch, backward until an optimizer marks the steps, the optimizer step's
    post-hook, with CUDA events on CUDA), no training."""
    import torch

    from gpumon.hook.runtime import HookRuntime

    device = torch.device(args.device)
    weight = torch.zeros(4, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()  # CUDA initialized, as in a job, so the event path runs

    class Optimizer:
        def __init__(self) -> None:
            self.param_groups = [{"params": [weight]}]

    optimizer, batch, iterator = Optimizer(), (torch.zeros(4, 64), torch.zeros(4)), object()
    out = {}
    for every in (None, 1):  # None: the default schedule (one in 8, at most about ten a second)
        for name, with_fetch in (("optimizer_step_only", False), ("fetch_backward_optimizer", True)):
            runtime = HookRuntime(torch)
            if every is not None:
                runtime.gpu_every = every
            for _ in range(2):  # the first pass warms up (and starts GPU timing after a few steps)
                started = time.perf_counter()
                next_batch = runtime.dataloader_next(lambda _iterator: batch)  # the DataLoader wrapper's own code
                for _ in range(args.micro_steps):
                    if with_fetch:  # as the patched functions call the runtime
                        next_batch(iterator)
                        if runtime.backward_matters:
                            runtime.on_backward()
                    runtime.optimizer_step_hook(optimizer, (), {})
                per_step = (time.perf_counter() - started) / args.micro_steps * 1e6
            suffix = "" if device.type != "cuda" else f"_gpu_timing_{'default' if every is None else 'every_1'}"
            out[f"{name}{suffix}_us"] = round(per_step, 3)
            if runtime.errors:
                raise RuntimeError(f"hook errors during the micro benchmark: {runtime.last_error}")
        if device.type != "cuda":
            break
    return out


def sampler_cost(args: argparse.Namespace) -> dict[str, Any]:
    """The stack sampler's cost on the launch-bound loop (`--loops`' first), in one process: `--rounds` rounds of
    `--steps`-step windows without the sampler's thread, with it at its default rate, and (on CUDA) with it but not
    asking the training stream whether it has work (`stream.query()`, a CUDA call beside the job's launches), in an
    order that rotates; and the CPU its thread used per sample, which bounds what it can take from the training
    thread (it holds the GIL at most that long)."""
    import torch

    from gpumon.hook.runtime import HookRuntime
    from gpumon.hook.stack_sampler import SAMPLE_HZ, StackSampler

    args.loop = args.loops[0]
    run = training_loop(args)
    run(args.warmup)
    runtime = HookRuntime(torch)

    class Optimizer:
        def __init__(self) -> None:
            self.param_groups: list[dict[str, Any]] = [{"params": []}]

    for _ in range(3):  # as a job's optimizer steps do: the training thread and, on CUDA, its device are noted
        runtime.optimizer_step_hook(Optimizer(), (), {})
    variants = ["off", "hook", *(["no_query"] if args.device == "cuda" else [])]
    stacks: dict[Any, Any] = {}  # as in a job, where one sampler runs all along: its classified stacks carry over
    rates: dict[str, list[float]] = {variant: [] for variant in variants}
    cost_ms = sampled_s = 0.0
    samples = 0
    for index in range(args.rounds):
        for variant in variants[index % len(variants) :] + variants[: index % len(variants)]:
            sampler = StackSampler(runtime, torch) if variant != "off" else None
            if sampler is not None:
                sampler._stacks = stacks
                if variant == "no_query":
                    sampler.gpu_state = "not read (the benchmark's no_query variant)"
                sampler.start()
            started = time.perf_counter()
            run(args.steps)
            elapsed = time.perf_counter() - started
            if sampler is not None:
                sampler.stop()
                sampler.join(1.0)
                if variant == "hook":
                    result = sampler.result()
                    cost_ms += result["cost_ms"]
                    samples += result["samples"]
                    sampled_s += elapsed
            rates[variant].append(args.steps / elapsed)
        print(  # as it goes: a run cut by a time limit still leaves its rounds
            f"  round {index + 1}/{args.rounds}: "
            + "  ".join(f"{variant} {rates[variant][-1]:.1f}" for variant in variants)
            + f" steps/s; {samples} samples, {cost_ms:.2f} ms of sampler CPU so far",
            file=sys.stderr,
            flush=True,
        )
    if runtime.errors:
        raise RuntimeError(f"hook errors during the sampler benchmark: {runtime.last_error}")
    return {
        "loop": args.loop,
        "sampler_hz": SAMPLE_HZ,
        "samples": samples,
        "sampler_cpu_us_per_sample": round(cost_ms * 1e3 / samples, 2) if samples else None,
        "sampler_cpu_share_of_the_time": cost_ms / 1e3 / sampled_s if sampled_s else None,
        "paired": summarize(rates)["hook"],
        **({"paired_without_the_gpu_query": summarize(rates)["no_query"]} if "no_query" in rates else {}),
        "steps_per_s": rates,
    }


def _drain(path: str, stop: threading.Event, counts: dict[str, int]) -> None:
    from gpumon.jobs.connection import HookConnection

    try:
        with HookConnection(path, timeout=5) as conn:
            counts["hello"] = 1
            conn.send({"type": "subscribe", "steps_interval": 0.2, "state_interval": 1.0})
            while not stop.is_set():
                msg = conn.recv(0.2)
                if msg is not None:
                    counts[msg["type"]] = counts.get(msg["type"], 0) + 1
    except (OSError, EOFError):
        pass


class Worker:
    """A long-lived worker process of one variant; `measure()` runs one timed window in it."""

    def __init__(self, loop: str, variant: str, args: argparse.Namespace, sock_dir: str) -> None:
        env = {
            **os.environ,
            "GPUMON_SOCKET_DIR": sock_dir,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        if variant == "hook_every_step":
            env["GPUMON_HOOK_GPU_TIMING"] = "1"
        if variant == "imports_only":
            env["GPUMON_HOOK"] = "0"
        if variant == "hook_no_sampler":
            env["GPUMON_HOOK_SAMPLE_HZ"] = "0"
        command = [
            sys.executable,
            __file__,
            "--worker",
            "--loop",
            loop,
            "--variant",
            variant,
            "--device",
            args.device,
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--threads",
            str(args.threads),
            *(["--cpu", str(args.cpu)] if args.cpu is not None else []),
            *(["--idle-thread"] if args.idle_thread else []),
        ]
        self.variant = variant
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        self.stop = threading.Event()
        self.counts: dict[str, int] = {}
        self.reader: threading.Thread | None = None
        self.sock_dir = sock_dir

    def wait_ready(self) -> None:
        """Wait for the warm-up to end; attach the client to the `client` variant."""
        ready = _event(self.proc, "ready")
        if self.variant == "client":
            path = os.path.join(self.sock_dir, f"{ready['pid']}.sock")
            self.reader = threading.Thread(target=_drain, args=(path, self.stop, self.counts), daemon=True)
            self.reader.start()
            deadline = time.monotonic() + 5
            while not self.counts.get("hello") and time.monotonic() < deadline:
                time.sleep(0.01)
            if not self.counts.get("hello"):
                raise RuntimeError("the client could not attach to the hooked worker")

    def measure(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(_event(self.proc, "result")["steps_per_s"])

    def close(self) -> None:
        self.stop.set()
        if self.reader is not None:
            self.reader.join(2)
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _event(proc: subprocess.Popen, name: str) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == name:
                return event
    raise RuntimeError(f"worker ended before {name!r}: {proc.stderr.read() if proc.stderr else ''}")


def device_name(device: str) -> str:
    if device == "cuda":
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.get_device_name(0))"], capture_output=True, text=True
        )
        return probe.stdout.strip() or "cuda"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"CPU: {line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def _torch_version() -> str:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    return probe.stdout.strip()


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median (order statistics, normal approximation
    of the binomial); the whole range where there are too few values for one."""
    ordered = sorted(values)
    n = len(ordered)
    half_width = 0.98 * n**0.5  # 1.96 * sqrt(n) / 2
    low, high = math.floor(n / 2 - half_width), math.ceil(n / 2 + half_width)
    if low < 0 or high >= n:
        return ordered[0], ordered[-1]
    return ordered[low], ordered[high]


def summarize(rates: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    base = rates["off"]
    for variant, values in rates.items():
        median = statistics.median(values)
        summary = {
            "median_steps_per_s": median,
            "spread_pct": (max(values) - min(values)) / median * 100,
            "rounds": len(values),
        }
        if variant != "off":
            ratios = [on / off for on, off in zip(values, base, strict=False)]
            summary["overhead_pct"] = (1 - statistics.median(ratios)) * 100
            low, high = median_interval(ratios)
            summary["overhead_ci95_pct"] = [(1 - high) * 100, (1 - low) * 100]
            summary["overhead_of_medians_pct"] = (1 - median / statistics.median(base)) * 100
        out[variant] = summary
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--loops", nargs="+", default=list(LOOPS), choices=LOOPS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS + EXTRA_VARIANTS)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--windows",
        type=int,
        default=1,
        help="timed windows per variant in each round's processes, alternated (each one a pair)",
    )
    parser.add_argument("--steps", type=int, default=0, help="timed steps per window (default: 1500 CPU, 3000 CUDA)")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in the worker (0: default)")
    parser.add_argument("--cpu", type=int, default=None, help="pin every worker to this CPU core (less noise)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON here ('-' for stdout)")
    parser.add_argument("--micro", action="store_true", help="only time the hook's own per-step work, in-process")
    parser.add_argument(
        "--sampler-cost",
        action="store_true",
        help="only the stack sampler: its CPU a sample, and steps/s with and without it, paired, in-process",
    )
    parser.add_argument("--micro-steps", type=int, default=20000)
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="alternate hook off/on inside one process (install/uninstall) instead of one process "
        "per variant: no process-to-process differences",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="with --in-process: a third variant, 'churn', whose windows install the hook and uninstall it again "
        "before their warm-up (what switching costs the window after it, with no hook in it); the hook is then also "
        "compared against churn",
    )
    parser.add_argument(
        "--idle-thread",
        action="store_true",
        help="start one idle thread in every process before the loop, so that each variant runs in a process that "
        "already has threads, as every CUDA job does (the hook's server thread then costs only itself)",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="with --in-process: also the host time per step of fetch, backward and optimizer step, and how often the "
        "training thread was scheduled (schedstat: waking another thread would show), off against on, paired",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", default="tensor", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="off", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if "off" not in args.variants:
        parser.error("--variants must include off (the baseline)")
    if args.device == "auto":
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
        )
        args.device = "cuda" if probe.stdout.strip() == "True" else "cpu"
    if not args.steps:
        args.steps = 3000 if args.device == "cuda" else 1500
    if args.sampler_cost:
        report = {
            "benchmark": "hook_overhead --sampler-cost",
            "device": device_name(args.device),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "rounds": args.rounds,
            "steps": args.steps,
            **sampler_cost(args),
        }
        paired = report["paired"]
        print(
            f"stack sampler at {report['sampler_hz']} Hz on the {report['loop']} loop ({report['device']}): "
            f"{report['sampler_cpu_us_per_sample']} us of CPU a sample, "
            f"{(report['sampler_cpu_share_of_the_time'] or 0) * 100:.3f}% of the time; paired steps/s "
            f"{paired['overhead_pct']:+.2f}% "
            + "[{:+.2f}%, {:+.2f}%]".format(*paired["overhead_ci95_pct"])
            + f" over {args.rounds} rounds x {args.steps} steps"
        )
        if "paired_without_the_gpu_query" in report:
            without = report["paired_without_the_gpu_query"]
            print(
                f"  without its stream query: paired steps/s {without['overhead_pct']:+.2f}% "
                + "[{:+.2f}%, {:+.2f}%]".format(*without["overhead_ci95_pct"])
            )
        if args.json and args.json != "-":
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        return
    if args.micro:
        result = {
            "benchmark": "hook_overhead --micro",
            "device": device_name(args.device),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            **micro(args),
        }
        print(json.dumps(result, indent=2))
        if args.json and args.json != "-":
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        return

    results: dict[str, Any] = {
        "benchmark": "hook_overhead",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "device": device_name(args.device),
        "device_type": args.device,
        "python": platform.python_version(),
        "torch": _torch_version(),
        "rounds": args.rounds,
        "steps": args.steps,
        "warmup": args.warmup,
        "threads": args.threads,
        "idle_thread": args.idle_thread,
        "cpu": args.cpu,
        "windows": args.windows,
        "loops": {},
    }
    sock_dir = tempfile.mkdtemp(prefix="gpumon-bench-", dir="/tmp") + "/s"
    if args.in_process:
        os.environ["GPUMON_SOCKET_DIR"] = sock_dir
        results["mode"] = "in-process, with the churn control" if args.control else "in-process"
    for loop in args.loops if args.in_process else ():
        rates, cpu_rates = in_process(args, loop)
        phase_rates = {key: rates.pop(key) for key in [k for k in rates if ":" in k]}
        results["loops"][loop] = {
            "summary": summarize(rates),
            "steps_per_s": rates,
            "cpu_time_summary": summarize(cpu_rates),
            "steps_per_cpu_s": cpu_rates,
        }
        for summary_key, values in (("summary", rates), ("cpu_time_summary", cpu_rates)):
            if "churn" in values:
                against_churn = summarize({"off": values["churn"], "hook": values["hook"]})["hook"]
                results["loops"][loop][summary_key]["hook_vs_churn"] = against_churn
        if phase_rates:
            results["loops"][loop]["phases_us_per_step"] = summarize_phases(phase_rates)
            results["loops"][loop]["phases_raw"] = phase_rates
    for loop in args.loops if not args.in_process else ():
        rates: dict[str, list[float]] = {variant: [] for variant in args.variants}
        client_messages: dict[str, int] = {}
        for round_index in range(args.rounds):
            # Fresh processes every round: a process's own bias (memory layout, core, GPU context) then
            # varies from round to round instead of siding with one variant for the whole run.
            workers = {}
            try:
                for variant in args.variants:
                    workers[variant] = Worker(loop, variant, args, sock_dir)
                for worker_process in workers.values():
                    worker_process.wait_ready()
                for window in range(args.windows):
                    order = args.variants if (round_index + window) % 2 == 0 else list(reversed(args.variants))
                    for variant in order:
                        rates[variant].append(workers[variant].measure())
            finally:
                for w in workers.values():
                    w.close()
            for kind, count in workers["client"].counts.items() if "client" in workers else ():
                client_messages[kind] = client_messages.get(kind, 0) + count
            print(
                f"  {loop} round {round_index + 1}/{args.rounds}: "
                + "  ".join(f"{v} {statistics.median(rates[v][-args.windows :]):.1f}" for v in args.variants),
                file=sys.stderr,
                flush=True,
            )
        results["loops"][loop] = {"summary": summarize(rates), "steps_per_s": rates, "client_messages": client_messages}
        if "hook_no_sampler" in rates and "hook" in rates:
            sampler = summarize({"off": rates["hook_no_sampler"], "hook": rates["hook"]})["hook"]
            results["loops"][loop]["sampler_vs_no_sampler"] = sampler

    print(
        f"hook overhead, {results['device']}, {results['date']}, python {results['python']}, torch {results['torch']}"
    )
    windows = f" x {args.windows} windows" if args.windows > 1 and not args.in_process else ""
    print(
        f"{args.rounds} rounds{windows} x {args.steps} steps (after {args.warmup} warm-up), alternated"
        f"{' in one process' if args.in_process else ''}, "
        f"threads={args.threads}"
        + (", an idle thread in each process" if args.idle_thread else "")
        + (f", pinned to CPU {args.cpu}" if args.cpu is not None else "")
    )
    print(f"{'loop':<11} {'variant':<16} {'median steps/s':>15} {'spread':>8} {'overhead':>9}  95% CI")
    for loop, data in results["loops"].items():
        for variant, summary in data["summary"].items():
            overhead = f"{summary['overhead_pct']:+.2f}%" if "overhead_pct" in summary else "-"
            interval = (
                "[{:+.2f}%, {:+.2f}%]".format(*summary["overhead_ci95_pct"]) if "overhead_ci95_pct" in summary else ""
            )
            print(
                f"{loop:<11} {variant:<16} {summary['median_steps_per_s']:>15.1f} "
                f"{summary['spread_pct']:>7.1f}% {overhead:>9}  {interval}"
            )
    for loop, data in results["loops"].items():
        sampler = data.get("sampler_vs_no_sampler")
        if sampler:
            print(
                f"{loop:<11} the stack sampler (hook against hook_no_sampler, paired): "
                f"{sampler['overhead_pct']:+.2f}%  " + "[{:+.2f}%, {:+.2f}%]".format(*sampler["overhead_ci95_pct"])
            )
        for variant, summary in data.get("cpu_time_summary", {}).items():
            if "overhead_pct" in summary:
                print(
                    f"{loop:<11} {variant:<16} per CPU-second of the training thread: "
                    f"{summary['median_steps_per_s']:.1f} steps, overhead {summary['overhead_pct']:+.2f}%  "
                    "[{:+.2f}%, {:+.2f}%]".format(*summary["overhead_ci95_pct"])
                )
        for phase, figures in data.get("phases_us_per_step", {}).items():
            unit = "" if phase.endswith("per_window") else " us/step"
            print(
                f"{loop:<11} {phase:<24} off {figures['off']:9.2f}  hook {figures['hook']:9.2f}  "
                f"paired difference {figures['paired_difference']:+8.2f}{unit}  "
                "[{:+.2f}, {:+.2f}]".format(*figures["paired_difference_ci95"])
            )
    if args.json:
        text = json.dumps(results, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
