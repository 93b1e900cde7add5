"""Steps/s of a launch-bound loop before and after many budgeted steps: does the step budget leave torch slower?

From Python 3.13, CPython gives a class at most MAX_VERSIONS_PER_CLASS (1,000) version tags; each edit of the class
(setting or deleting an attribute) costs one once its attributes are looked up again. A class out of tags is never
given an attribute cache again, so every attribute of its instances (every tensor method and property) is looked up
the slow way for the rest of the process. The step budget's timing wrappers on torch.Tensor used to go on and off
at every budgeted step (up to four a second); this measures what that did, against what the hook does now.

Each mode runs in a fresh process (an exhausted class stays exhausted): it times the loop with no hook
(`--rounds` windows of `--steps` steps, median), then runs `--cycles` budgeted steps, then times the loop again:

    none    nothing in between: the control (drift of the process between the two timings)
    toggle  each budgeted step puts the wrappers on and takes them off (BudgetMeter.begin(True), one step,
            BudgetMeter.stop()): what the hook did before
    kept    each budgeted step turns the wrappers' timing on and off (begin(True), one step, begin(False)), stop()
            at the end: what the hook does now
    hook    `gpumon.hook` installed with GPUMON_HOOK_BUDGET_EVERY=1 (every step budgeted) for the cycles, then
            uninstalled: the hook as shipped

Usage (from the project root, any interpreter with torch; the effect needs Python 3.13 or newer):

    python benchmarks/type_version_tags.py --json out.json
    python3.11 benchmarks/type_version_tags.py --python /path/to/python3.13 --json out.json
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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODES = ("none", "toggle", "kept", "hook")


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One mode in this process: steps/s before and after the cycles."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    import torch
    from hook_overhead import training_loop

    run = training_loop(
        argparse.Namespace(threads=1, device="cpu", steps=args.steps, warmup=args.warmup, loop="dataloader")
    )
    run(args.warmup)

    def windows() -> list[float]:
        rates = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            run(args.steps)
            rates.append(args.steps / (time.perf_counter() - started))
        return rates

    probe = torch.nn.Parameter(torch.ones(2))
    batch = torch.ones(2)

    def lookup_ns(rounds: int = 5, count: int = 100_000) -> float:
        """ns per attribute read of a tensor or parameter (a property and a method, no call): the type's cache."""
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(count):
                probe.grad, probe.is_cuda, batch.dim, batch.shape  # noqa: B018 - the reads are what is timed
            best = min(best, (time.perf_counter() - started) / (4 * count) * 1e9)
        return best

    lookups_before = lookup_ns()
    before = windows()
    edits = None
    if args.mode in ("toggle", "kept"):
        os.environ["GPUMON_HOOK"] = "0"  # importing gpumon.hook would install the hook itself, budget and all
        from gpumon.hook.runtime import HookRuntime

        meter = HookRuntime(torch).budget
        for _ in range(args.cycles):
            meter.begin(True)
            run(1)
            if args.mode == "toggle":
                meter.stop()
            else:
                meter.begin(False)
        meter.stop()
        edits = meter.class_edits
    elif args.mode == "hook":
        os.environ["GPUMON_HOOK_BUDGET_EVERY"] = "1"
        import gpumon.hook
        from gpumon.hook import lifecycle

        gpumon.hook.install(lazy=False)
        for done in range(0, args.cycles, args.steps):  # a window at a time: the loader holds --steps batches
            run(min(args.steps, args.cycles - done))
        runtime = lifecycle.runtime()
        budgeted = sum(record[-1] is not None for record in runtime.snapshot_records())
        edits = runtime.budget.class_edits
        gpumon.hook.uninstall()
        edits_after = runtime.budget.class_edits
        print(f"  hook: {budgeted} budgeted step records, class edits {edits} on, {edits_after} after", file=sys.stderr)
        edits = edits_after
    run(args.rewarm if args.rewarm is not None else args.warmup)
    after = windows()
    lookups_after = lookup_ns()
    return {
        "mode": args.mode,
        "before_steps_per_s": statistics.median(before),
        "after_steps_per_s": statistics.median(after),
        "after_vs_before": statistics.median(after) / statistics.median(before) - 1,
        "class_edits": edits,
        "lookup_ns_before": lookups_before,
        "lookup_ns_after": lookups_after,
        "before": before,
        "after": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--cycles", type=int, default=1200, help="budgeted steps between the timings (1,200: 5 min)")
    parser.add_argument("--rounds", type=int, default=15, help="timed windows before and after")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument(
        "--rewarm",
        type=int,
        default=None,
        help="steps run after the cycles before timing again (default --warmup): long enough, the interpreter has "
        "specialized its code again wherever it can",
    )
    parser.add_argument("--repeats", type=int, default=2, help="fresh processes per mode, modes alternated")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run the modes with (a path)")
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(child(args)))
        return
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for mode in args.modes if repeat % 2 == 0 else reversed(args.modes):
            command = [args.python, __file__, "--mode", mode]
            for name in ("cycles", "rounds", "steps", "warmup", "rewarm", "cpu"):
                if getattr(args, name) is not None:
                    command += [f"--{name}", str(getattr(args, name))]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"type_version_tags: mode {mode} failed: {done.stderr.strip().splitlines()[-1:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append(result)
            print(
                f"{mode:>6}: {result['before_steps_per_s']:7.1f} -> {result['after_steps_per_s']:7.1f} steps/s "
                f"({result['after_vs_before']:+.2%}); a tensor attribute read {result['lookup_ns_before']:.1f} -> "
                f"{result['lookup_ns_after']:.1f} ns; class edits {result['class_edits']}",
                flush=True,
            )
    version = subprocess.run(
        [args.python, "-c", "import platform, torch; print(platform.python_version(), torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    summary = {mode: statistics.median(r["after_vs_before"] for r in runs if r["mode"] == mode) for mode in args.modes}
    print("median steps/s after/before: " + ", ".join(f"{mode} {change:+.2%}" for mode, change in summary.items()))
    lookups = {
        mode: statistics.median(r["lookup_ns_after"] / r["lookup_ns_before"] for r in runs if r["mode"] == mode)
        for mode in args.modes
    }
    print("median attribute read after/before: " + ", ".join(f"{mode} {ratio:.2f}x" for mode, ratio in lookups.items()))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "benchmark": "type_version_tags",
                    "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                    "python": version[0],
                    "torch": version[1],
                    "machine": platform.machine(),
                    "cycles": args.cycles,
                    "rounds": args.rounds,
                    "steps": args.steps,
                    "rewarm": args.rewarm if args.rewarm is not None else args.warmup,
                    "summary": summary,
                    "attribute_read_after_vs_before": lookups,
                    "runs": runs,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
