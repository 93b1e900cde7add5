"""The hook's cost inside one process: steps/s of a launch-bound loop with the hook installed and uninstalled in turn.

Usage (from the project root):

    python benchmarks/hook_cost_inprocess.py --device cuda --pairs 7 --window 3     # the H200 run
    python benchmarks/hook_cost_inprocess.py --device cpu --pairs 9 --window 2      # a CPU build

The loop: an MLP (on CUDA 12 Linear(256, 256) layers, about 300 steps/s on an H200; on the CPU 4 Linear(32, 32)
layers), batch 64, AdamW, its batch already on the device, so a step is many small launches and any per-step cost of
the hook shows. The hook goes on with `gpumon.hook.install(lazy=False)` and off with `gpumon.hook.uninstall()`,
between windows, in this one process: on, it is all of it (the patches, the step budget with its device->host copy,
optimizer and allocator counting, the garbage collector's callback, the torch.cuda.empty_cache wrapper, the socket
server's thread and the stack sampler's thread, nobody attached); off, none of it is left (the patches, callbacks and
hooks come off, the threads stop). Each pair is one window of each, `--window` seconds after a short warm-up, in
alternating order (on-off, off-on, ...) so a drift favours neither. Reported: the median of the pairs' ratios
(steps/s on over off), their min and max, and the same for the training thread's CPU time (which leaves out the time
other tenants of a shared machine took). The last line on stdout is one JSON object with all of it.

`--variants` adds hooked windows with one part of the hook off (set through its environment variable before each
install), to tell which part costs: `no_budget` (GPUMON_HOOK_BUDGET_EVERY=0), `no_sampler`
(GPUMON_HOOK_SAMPLE_HZ=0), `no_gpu_timing` (GPUMON_HOOK_GPU_TIMING=0), `bare` (all three off). Each round then runs
`off` and every variant once, in an order rotated round by round, and each variant's ratio is taken against the
round's `off` window. Each window also reports the whole process's CPU time (the hook's threads included).

Windows of a few seconds differ by several percent on a shared machine, so each hooked window also reads what the
hook costs from its own step records (`from_step_records`): the wall of its budgeted and GPU-timed steps, and of the
step after each, beyond the median plain step's, as a share of the window; and the stack sampler's own CPU time (it
holds the GIL while it samples) as a share of the window. What those leave out is the quiet boundary's few
microseconds a step, which the A/B alone measures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build_loop(
    device_name: str, layers: int, width: int, batch: int
) -> tuple[Callable[[float], tuple[int, float, float]], Any]:
    """A function that trains for about `seconds` and returns (steps, wall seconds, thread CPU seconds)."""
    import torch

    device = torch.device(device_name)
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=device)
    target = torch.randn(batch, width, device=device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def train(seconds: float) -> tuple[int, float, float]:
        synchronize()
        clock = time.perf_counter
        started = clock()
        cpu_started = time.thread_time()
        deadline = started + seconds
        steps = 0
        while True:
            loss = torch.nn.functional.mse_loss(model(x), target)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            if clock() >= deadline:
                break
        synchronize()
        return steps, clock() - started, time.thread_time() - cpu_started

    return train


def step_costs(records: list[list[Any]]) -> dict[str, Any]:
    """What the hook's busy boundaries cost, read from its own step records of one window: the wall of the budgeted
    steps and of the GPU-timed ones (with the step after each, where a boundary's work lands) beyond the median plain
    step's, as a share of the window's steps. Adjacent steps share the machine's state, so this sees a cost of a few
    microseconds a step that window-to-window noise of several percent hides."""
    from gpumon.hook.runtime import R_BUDGET, R_GPU, R_WALL

    kinds: list[str] = []
    for record in records:
        kinds.append("budget" if record[R_BUDGET] is not None else "gpu" if record[R_GPU] is not None else "plain")
    walls = [record[R_WALL] for record in records]
    owner: list[str] = []
    for index, kind in enumerate(kinds):
        before = kinds[index - 1] if index > 0 else "plain"
        owner.append(kind if kind != "plain" else before if before != "plain" else "plain")
    plain = [wall for wall, who in zip(walls, owner, strict=True) if who == "plain"]
    total = sum(walls)
    if len(plain) < 10 or total <= 0:
        return {}
    median_plain = statistics.median(plain)
    costs: dict[str, Any] = {"steps": len(walls), "median_plain_ms": round(median_plain * 1e3, 4)}
    for kind in ("budget", "gpu"):
        mine = [wall for wall, who in zip(walls, owner, strict=True) if who == kind]
        excess = sum(wall - median_plain for wall in mine)
        costs[f"{kind}_steps"] = sum(1 for k in kinds if k == kind)
        costs[f"{kind}_excess_ms"] = round(excess * 1e3, 3)
        costs[f"{kind}_cost_percent"] = round(100 * excess / total, 3)
    return costs


def sampler_cpu_ms() -> float:
    """The stack sampler's own CPU so far (ms; 0 without one): it holds the GIL while it samples."""
    from gpumon.hook import lifecycle

    runtime = lifecycle.runtime()
    sampler = runtime.sampler if runtime is not None else None
    return float(sampler.result()["cost_ms"]) if sampler is not None else 0.0


def hook_checks(since: float | None = None) -> dict[str, Any]:
    """What the installed hook measured in the window just run (its steps that ended after `since`, perf_counter):
    its new instruments were on, and what its busy boundaries cost there."""
    from gpumon.hook import lifecycle
    from gpumon.hook.runtime import R_BUDGET, R_END, R_GPU

    runtime = lifecycle.runtime()
    if runtime is None:
        return {}
    records = runtime.snapshot_records()
    window = [record for record in records if since is None or record[R_END] >= since]
    budgets = [record[R_BUDGET] for record in records if record[R_BUDGET] is not None]
    return {
        "steps": len(records),
        "budgeted_steps": len(budgets),
        "gc_timer_running": runtime.gc_timer.running,
        "gc_passes": runtime.gc_timer.passes,
        "optimizer_ms_per_budgeted_step": (
            round(statistics.fmean(b.get("optimizer_ms", 0.0) for b in budgets), 4) if budgets else None
        ),
        "gpu_timed_steps": sum(1 for record in records if record[R_GPU] is not None),
        "sampler": runtime.sampler is not None,
        "sampler_cpu_ms": sampler_cpu_ms() if runtime.sampler is not None else None,
        "sampler_samples": runtime.sampler.samples if runtime.sampler is not None else None,
        "errors": runtime.errors,
        "window_steps": step_costs(window),
    }


VARIANT_ENV: dict[str, dict[str, str]] = {
    "on": {},
    "no_budget": {"GPUMON_HOOK_BUDGET_EVERY": "0"},
    "no_sampler": {"GPUMON_HOOK_SAMPLE_HZ": "0"},
    "no_gpu_timing": {"GPUMON_HOOK_GPU_TIMING": "0"},
    "bare": {"GPUMON_HOOK_BUDGET_EVERY": "0", "GPUMON_HOOK_SAMPLE_HZ": "0", "GPUMON_HOOK_GPU_TIMING": "0"},
}
"""Hooked variants: the environment each is installed under (every other hook variable left unset)."""


def switch_to(variant: str) -> None:
    """Uninstall the hook, then install it under `variant`'s environment (`off`: leave it uninstalled)."""
    import gpumon.hook

    gpumon.hook.uninstall()
    for names in VARIANT_ENV.values():
        for name in names:
            os.environ.pop(name, None)
    if variant != "off":
        os.environ.update(VARIANT_ENV[variant])
        gpumon.hook.install(lazy=False)


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--pairs", type=int, default=7, help="on/off window pairs (at least 7 for the record)")
    parser.add_argument("--window", type=float, default=3.0, help="seconds timed in each window")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds run untimed after each switch")
    parser.add_argument("--layers", type=int, default=None, help="Linear layers (default: 12 on CUDA, 4 on the CPU)")
    parser.add_argument("--width", type=int, default=None, help="their width (default: 256 on CUDA, 32 on the CPU)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="also write each window and the summary here (JSON)")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=sorted(VARIANT_ENV),
        default=["on"],
        help="hooked variants timed against off in each round (default: on, the whole hook)",
    )
    args = parser.parse_args()

    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device == "cuda"
    layers = args.layers or (12 if cuda else 4)
    width = args.width or (256 if cuda else 32)
    train = build_loop(device, layers, width, args.batch)

    import gpumon.hook

    gpumon.hook.uninstall()  # importing installed it: every window switches it explicitly
    train(max(1.0, args.warmup))
    windows: list[dict[str, Any]] = []
    variants = list(dict.fromkeys(args.variants))
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    cpu_ratios: dict[str, list[float]] = {v: [] for v in variants}
    everyone = ["off", *variants]
    for pair in range(args.pairs):
        if len(everyone) == 2:
            order = everyone if pair % 2 == 0 else everyone[::-1]  # on-off, off-on, ...
        else:
            shift = pair % len(everyone)
            order = everyone[shift:] + everyone[:shift]
        rates: dict[str, tuple[float, float]] = {}
        for variant in order:
            switch_to(variant)
            train(args.warmup)
            process_started = time.process_time()
            window_started = time.perf_counter()
            sampler_before = sampler_cpu_ms() if variant != "off" else 0.0
            steps, wall, cpu = train(args.window)
            process_cpu = time.process_time() - process_started
            checks = hook_checks(window_started) if variant != "off" else {}
            if checks:
                sampled_ms = sampler_cpu_ms() - sampler_before
                checks["window_steps"]["sampler_cost_percent"] = round(100 * sampled_ms / (wall * 1e3), 3)
            rates[variant] = (steps / wall, steps / cpu if cpu > 0 else float("nan"))
            window = {
                "pair": pair,
                "variant": variant,
                "steps": steps,
                "wall_s": round(wall, 4),
                "cpu_s": round(cpu, 4),
                "process_cpu_s": round(process_cpu, 4),
            }
            window["steps_per_s"] = round(steps / wall, 2)
            if checks:
                window["hook"] = checks
            windows.append(window)
            print(json.dumps(window), file=sys.stderr, flush=True)
        for variant in variants:
            ratios[variant].append(rates[variant][0] / rates["off"][0])
            cpu_ratios[variant].append(rates[variant][1] / rates["off"][1])
    switch_to("off")

    def rates_of(variant: str) -> list[float]:
        return [w["steps_per_s"] for w in windows if w["variant"] == variant]

    def process_cpu_per_s(variant: str) -> float:
        return statistics.median(w["process_cpu_s"] / w["wall_s"] for w in windows if w["variant"] == variant)

    def from_step_records(variant: str) -> dict[str, Any]:
        """Medians over the variant's windows of what the busy boundaries and the sampler cost (step_costs)."""
        costs = [w["hook"]["window_steps"] for w in windows if w["variant"] == variant and w.get("hook")]
        costs = [c for c in costs if c.get("steps")]
        keys = ("budget_cost_percent", "gpu_cost_percent", "sampler_cost_percent")
        return {key: round(statistics.median(c.get(key, 0.0) for c in costs), 4) for key in keys} if costs else {}

    lead = variants[0]
    summary = {
        "benchmark": "hook_cost_inprocess",
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.processor() or platform.machine()})",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "loop": {"layers": layers, "width": width, "batch": args.batch, "optimizer": "AdamW", "device": device},
        "pairs": args.pairs,
        "window_s": args.window,
        "steps_per_s_off": spread(rates_of("off")),
        "process_cpu_per_s_off": round(process_cpu_per_s("off"), 4),
        "variants": {
            variant: {
                "steps_per_s": spread(rates_of(variant)),
                "ratio": spread(ratios[variant]),
                "cpu_ratio": spread(cpu_ratios[variant]),
                "cost_percent": round((1.0 - statistics.median(ratios[variant])) * 100, 3),
                "process_cpu_per_s": round(process_cpu_per_s(variant), 4),
                "from_step_records": from_step_records(variant),
            }
            for variant in variants
        },
        # The first variant's figures at the top level, as before variants existed.
        "steps_per_s_on": spread(rates_of(lead)),
        "ratio": spread(ratios[lead]),
        "cpu_ratio": spread(cpu_ratios[lead]),
        "cost_percent": round((1.0 - statistics.median(ratios[lead])) * 100, 3),
        "hook_checks_last_on_window": next((w["hook"] for w in reversed(windows) if "hook" in w), {}),
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"windows": windows, "summary": summary}, indent=1) + "\n")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
