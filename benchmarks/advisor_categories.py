"""GPU proof of the advisor: each job of benchmarks/advisor_jobs.py run under `gpumon diagnose --json`, and a table of
the category expected vs the one named; optionally the demo's guided ladder (`gpumon demo --guided`).

Usage (repo root, on the GPU machine; PYTHONPATH=$PWD):

    python benchmarks/advisor_categories.py                      # every case this machine can run (~5 min)
    python benchmarks/advisor_categories.py --case host_sync     # one case
    python benchmarks/advisor_categories.py --ladder             # only the demo's guided ladder (~2-3 min)

memory_imbalance needs 2 GPUs (nn.DataParallel): it is skipped, and says so, on one GPU; run it on
nvidia-h200-x2 with `--case memory_imbalance`. Results go to stdout and, with --out DIR, to DIR/advisor-*.json
and .md with the device and date. The commands run through `python -m gpumon`, which is what
`gpumon diagnose` / `gpumon demo` run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "benchmarks" / "advisor_jobs.py"
CASES = {
    # case: (expected category, GPUs needed)
    "input_bound": ("input_bound", 1),
    "host_sync": ("host_sync", 1),
    "launch_bound": ("launch_bound", 1),
    "transfer_bound": ("transfer_bound", 1),
    "low_precision": ("low_precision", 1),
    "io_bound": ("io_bound", 1),
    "healthy": ("healthy", 1),
    "memory_imbalance": ("memory_imbalance", 2),
}


def gpu_names() -> list[str]:
    sys.path.insert(0, str(REPO))
    from gpumon.sampling.sampler import sample_once

    return [gpu.name for gpu in sample_once(window=0.2).gpus]


def advisor(*args: str, timeout: float, stream_stderr: bool = False) -> subprocess.CompletedProcess[str]:
    """`python -m gpumon ARGS`; with stream_stderr its progress goes to this stderr as it comes (a run cut short by a
    time limit still shows how far it got) and the result's stderr is empty."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=None if stream_stderr else subprocess.PIPE,
        text=True,
        timeout=timeout,
    )


def run_case(case: str, duration: float, warmup: float) -> dict[str, Any]:
    expected, _ = CASES[case]
    started = time.monotonic()
    command = [sys.executable, str(JOBS), case, "--duration", "600"]
    result = advisor(
        "diagnose",
        "--json",
        "--duration",
        f"{duration:g}",
        "--warmup",
        f"{warmup:g}",
        "--",
        *command,
        timeout=duration + 300,
    )
    row: dict[str, Any] = {"case": case, "expected": expected, "seconds": round(time.monotonic() - started, 1)}
    if result.returncode != 0:
        row.update(named=None, ok=False, error=(result.stderr.strip().splitlines() or ["?"])[-1])
        return row
    data = json.loads(result.stdout)
    finding = data["finding"]
    signals = data["signals"]
    row.update(
        named=finding["category"],
        ok=finding["category"] == expected,
        confidence=finding["confidence"],
        evidence=finding["evidence"],
        secondary=[f["category"] for f in finding["secondary"]],
        gpu_util=signals.get("gpu_util"),
        sm_activity=signals.get("sm_activity"),
        tensor_activity=signals.get("tensor_activity"),
        data_share=signals.get("data_share"),
        syncs_per_step=signals.get("syncs_per_step"),
        pcie_rx=signals.get("pcie_rx"),
        samples_per_s=signals.get("samples_per_s"),
    )
    return row


def fmt(value: Any, pattern: str = "{:.0f}") -> str:
    return "-" if value is None else pattern.format(value)


def print_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'case':18}{'expected':18}{'named':18}{'conf':6}{'GPU-Util':10}{'SM':6}{'tensor':8}"
        f"{'data':6}{'syncs':7}evidence"
    ]
    for row in rows:
        named = row.get("named") or f"ERROR: {row.get('error', '')}"
        mark = "" if row.get("ok") else "  <-- MISMATCH" if row.get("named") else ""
        lines.append(
            f"{row['case']:18}{row['expected']:18}{named:18}{fmt(row.get('confidence'), '{:.2f}'):6}"
            f"{fmt(row.get('gpu_util')) + '%':10}{fmt(row.get('sm_activity')):6}{fmt(row.get('tensor_activity')):8}"
            f"{fmt(row.get('data_share') and row['data_share'] * 100) + '%':6}"
            f"{fmt(row.get('syncs_per_step'), '{:.1f}'):7}"
            f"{row.get('evidence', '')}{mark}"
        )
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def ladder(duration: float, warmup: float, out: Path | None, trials_only: bool = False) -> int:
    markdown = (out / "advisor-demo-ladder.md") if out else Path("/tmp/advisor-demo-ladder.md")
    started = time.monotonic()
    result = advisor(
        "demo",
        "--guided",
        "--json",
        "--duration",
        f"{duration:g}",
        "--warmup",
        f"{warmup:g}",
        "--markdown",
        str(markdown),
        *(["--trials-only"] if trials_only else []),
        timeout=3600,
        stream_stderr=True,
    )
    wall_s = time.monotonic() - started
    if result.returncode != 0:
        print(f"demo --guided failed: exit {result.returncode}")
        return 1
    report = json.loads(result.stdout)
    print(markdown.read_text())
    base = report["baseline"]["measurement"]
    kept = [v for v in report["variants"] if v["kept"]]
    best = kept[-1]["measurement"] if kept else base
    speed = best["rate"] / base["rate"] if base and base["rate"] else None
    variants = report["variants"]
    live = sum(1 for v in variants if v["kind"] == "live")
    print(
        f"baseline GPU-Util {fmt(base and base['gpu_util'])}% -> {fmt(best and best['gpu_util'])}%, "
        f"samples/s {fmt(base and base['rate'])} -> {fmt(best and best['rate'])} ({fmt(speed, '{:.1f}')}x); "
        f"target: <=30% -> >=90% and >=3x"
    )
    print(
        f"wall time {wall_s:.0f} s for `gpumon demo --guided` (the guided run itself: "
        f"{fmt(report['meta'].get('wall_s'))} s); {len(variants)} variants after the baseline, {live} of them live "
        f"on the running trial, {fmt(report['meta'].get('trial_starts'))} trial starts; target: >=90% in < 180 s"
    )
    sys.path.insert(0, str(REPO))
    from gpumon.advisor.results import PHASES

    rows = [report["baseline"], *variants]
    spent = {name: sum((row.get("phases") or {}).get(name, 0.0) for row in rows) for name in PHASES}
    between = (report["meta"].get("wall_s") or 0.0) - sum(spent.values())
    print(
        "where the guided run's time went: "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in spent.items())
        + f", between variants (stopping a losing trial, planning) {between:.1f} s"
    )
    if out:
        report["meta"]["command_wall_s"] = round(wall_s, 1)
        (out / "advisor-demo-ladder.json").write_text(json.dumps(report, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], choices=sorted(CASES))
    parser.add_argument("--duration", type=float, default=20.0, help="seconds diagnosed per case (default 20)")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--ladder", action="store_true", help="run the demo's guided ladder instead of the cases")
    parser.add_argument(
        "--ladder-duration", type=float, default=15.0, help="most seconds measured per ladder variant (default 15)"
    )
    parser.add_argument("--ladder-warmup", type=float, default=5.0)
    parser.add_argument(
        "--ladder-trials-only",
        action="store_true",
        help="each ladder variant a fresh trial run, every window (as before)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write JSON and Markdown results here")
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    names = gpu_names()
    device = f"{names[0]} x{len(names)}" if names else "no GPU"
    print(f"device: {device}; date: {datetime.date.today().isoformat()}", flush=True)
    if args.ladder:
        return ladder(args.ladder_duration, args.ladder_warmup, args.out, args.ladder_trials_only)
    rows = []
    for case in args.case or list(CASES):
        _, needed = CASES[case]
        if len(names) < needed:
            print(f"{case}: skipped: needs {needed} GPUs, {len(names)} here (run it on nvidia-h200-x2)", flush=True)
            continue
        print(f"{case}: diagnosing ...", flush=True)
        row = run_case(case, args.duration, args.warmup)
        rows.append(row)
        print(
            f"{case}: named {row.get('named') or 'ERROR ' + str(row.get('error'))} in {row['seconds']:g} s: "
            f"{row.get('evidence', '')}",
            flush=True,
        )
    text = print_table(rows)
    mismatches = [row["case"] for row in rows if not row.get("ok")]
    print(
        f"{len(rows) - len(mismatches)}/{len(rows)} named as expected"
        + (f"; mismatches: {mismatches}" if mismatches else "")
    )
    if args.out:
        stamp = {"device": device, "date": datetime.date.today().isoformat(), "rows": rows}
        (args.out / "advisor-categories.json").write_text(json.dumps(stamp, indent=1))
        report = f"device: {device}; date: {stamp['date']}\n\n```\n{text}\n```\n"
        (args.out / "advisor-categories.md").write_text(report)
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
