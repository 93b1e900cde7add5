"""Instructions per step that the hook adds to a launch-bound CPU loop, counted by valgrind (callgrind): no noise.

Steps/s on a shared machine move by more than the 1% target between windows; instruction counts do not. Each
variant runs in its own process under callgrind twice, with 0 and with `--steps` timed steps after the same warm-up
and the same data, so start-up (imports, warm-up, the hook's install) cancels out of the difference:
(instructions(steps) - instructions(0)) / steps. Repeats of a variant agree to a few instructions a step; runs set up
a little differently (other environment variables) have moved the hook's figure by up to 25,000 a step, for reasons
not pinned down (where objects land in memory, and so which attribute lookups collide in CPython's type attribute
cache, is one candidate).

    off        no hook, the loop's only thread
    offthread  no hook, with one idle extra thread: a process that already has threads (any CUDA job does; so
               does a CPU job with torch's intra-op pool). glibc's malloc takes its locks only once a second thread
               exists, so the first extra thread costs a single-threaded loop something by itself
    hook       `import gpumon.hook` (its server thread included)

Instructions are not time (cache misses, branch mispredictions); the steps/s A/B (hook_overhead.py) is the time
figure. Usage (from the project root; valgrind installed; about 2 minutes a run, 2 x repeats runs a variant):

    python benchmarks/hook_instructions.py --steps 400 --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("off", "offthread", "hook")


def child(variant: str, steps: int, warmup: int, batches: int) -> None:
    """The loop under callgrind: warm-up, then `steps` steps (the DataLoader holds `batches`, whatever `steps` is,
    so that both runs of a variant set up the same data)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    if variant != "hook":
        os.environ["GPUMON_HOOK"] = "0"
    import torch  # noqa: F401 - imported first, as a training script does
    from hook_overhead import training_loop

    if variant == "offthread":
        idle = threading.Event()
        threading.Thread(target=idle.wait, daemon=True).start()
    if variant == "hook":
        import gpumon.hook  # noqa: F401 - the line a user adds
    run = training_loop(argparse.Namespace(threads=1, device="cpu", steps=batches, warmup=warmup, loop="dataloader"))
    run(warmup)
    if steps:
        run(steps)


def instructions(variant: str, steps: int, args: argparse.Namespace, work: Path) -> int:
    work.mkdir(exist_ok=True)
    out = work / f"callgrind-{variant}-{steps}.out"
    loop = ["--child", variant, "--steps", str(steps), "--warmup", str(args.warmup), "--batches", str(args.steps)]
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, *loop],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=False,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not found:
        sys.exit(f"hook_instructions: {variant} with {steps} steps failed: {done.stderr.strip().splitlines()[-1:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=3, help="pairs of runs per variant (medians reported)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="callgrind runs at a time")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.warmup, max(args.batches, args.steps, args.warmup))
        return
    if shutil.which("valgrind") is None:
        sys.exit("hook_instructions: valgrind is not installed (Debian: apt-get install valgrind)")
    pairs: dict[str, list[float]] = {variant: [] for variant in args.variants}
    with tempfile.TemporaryDirectory(prefix="gpumon-callgrind-") as work, ThreadPoolExecutor(args.jobs) as pool:
        runs = {
            (variant, repeat, steps): pool.submit(instructions, variant, steps, args, Path(work) / f"{repeat}")
            for variant in args.variants
            for repeat in range(args.repeats)
            for steps in (0, args.steps)
        }
        for (variant, repeat, steps), counted in runs.items():
            if steps:
                pairs[variant].append((counted.result() - runs[(variant, repeat, 0)].result()) / args.steps)
    per_step = {variant: statistics.median(values) for variant, values in pairs.items()}
    for variant, values in pairs.items():
        print(
            f"{variant:>10}: {per_step[variant]:12,.0f} instructions a step (median; "
            f"{min(values):,.0f} to {max(values):,.0f} over {len(values)})"
        )
    results: dict[str, Any] = {
        "benchmark": "hook_instructions",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "instructions_per_step": per_step,
        "instructions_per_step_each": pairs,
    }
    for base in ("off", "offthread"):
        if base in per_step and "hook" in per_step:
            added = per_step["hook"] - per_step[base]
            results[f"hook_vs_{base}"] = {"instructions": added, "percent": added / per_step[base] * 100}
            print(f"hook against {base}: {added:+,.0f} instructions a step ({added / per_step[base] * 100:+.3f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
