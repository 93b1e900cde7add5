"""The generated corpus: jobs built from seeds, each measuring its own truth by ablation, scored against gpumon.

Usage (repo root, on the GPU machine):

    python benchmarks/scenario_corpus.py --set tune --count 30 --out benchmarks/results/corpus-tune-h200-DATE.json
    python benchmarks/scenario_corpus.py --seed 7 --seed 12 --device cpu --out /tmp/corpus.json   # a check

Each seed is one process (benchmarks/scenarios/generated/job.py, run by `gpumon run --no-tui`): after its warm-up it
trains its baseline while `gpumon diagnose --json --pid PID --duration D` watches it through its hook, then again
while the same command with `--pyspy` samples it with py-spy, then times its baseline against each cause's ablation
and prints the truth (1 - t_ablated / t_base per sample, each cause alone and all at once). Each phase ends when the
runner says so (a file in the job's control folder), so the diagnoses never see an ablation. The findings are scored
by benchmarks/scenario_truth.py's score(): the top category against that of the cause whose ablation gives back the
most (healthy when none gives back 15%), each cause's diagnosed share within 10 points of its truth, a healthy verdict
where an ablation gives back 20% or more, a false alarm on a job whose truth is healthy. A seed with the comm cause
needs 2 GPUs (torchrun) and is skipped with fewer; a job past --job-timeout has its process group killed. The JSON
(--out) and its .md sibling (the table and the summary) are written after each job.
"""

from __future__ import annotations

import argparse
import datetime
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scenario_truth import (
    HEALTHY,
    MIN_SEVERITY,
    RECOVERABLE,
    TOLERANCE,
    Cause,
    Scenario,
    commit,
    device_names,
    gpu_count,
    kill_group,
    parse_diagnosis,
    repo_env,
    run,
    score,
    summary,
)
from benchmarks.scenarios.generated.plan import (
    SEED_SETS,
    Plan,
    either_of,
    expected_category,
    make_plan,
    measured_causes,
)

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "benchmarks" / "scenarios" / "generated" / "job.py"
DIAGNOSE_SLACK_S = 120.0
"""A diagnose call's time limit beyond its --duration (start-up, py-spy's probe, a profiler capture)."""


def job_command(seed: int, plan: Plan, args: argparse.Namespace, control: str) -> list[str]:
    job = [
        str(JOB),
        "--seed",
        str(seed),
        "--device",
        args.device,
        "--control",
        control,
        "--warmup",
        f"{args.warmup:g}",
        "--hook-phase",
        f"{args.duration:g}",
        "--pyspy-phase",
        "0" if args.no_pyspy else f"{args.duration:g}",
        "--phase-cap",
        f"{args.duration + DIAGNOSE_SLACK_S + 30:g}",
        "--window",
        f"{args.window:g}",
        "--rounds",
        str(args.rounds),
    ]
    if plan.ranks > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(plan.ranks)]
        target = [*launcher, *job]
    else:
        target = [sys.executable, *job]
    return [sys.executable, "-m", "gpumon", "run", "--no-tui", "--", *target]


def diagnose(pid: int, duration: float, pyspy: bool) -> tuple[dict[str, Any] | None, str | None]:
    command = [sys.executable, "-m", "gpumon", "diagnose", "--json", "--pid", str(pid), "--duration", f"{duration:g}"]
    return parse_diagnosis(run([*command, *(["--pyspy"] if pyspy else [])], timeout=duration + DIAGNOSE_SLACK_S))


def lines_of(stream: Any, out: queue.Queue[str | None]) -> None:
    for line in stream:
        out.put(line.rstrip("\n"))
    out.put(None)


def phase_pid(line: str) -> int | None:
    for word in line.split():
        if word.startswith("pid="):
            return int(word[4:])
    return None


def run_job(seed: int, plan: Plan, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    """One job through its phases: the diagnoses at their phases, then its truth line."""
    out: dict[str, Any] = {"hook": None, "pyspy": None, "hook_error": None, "pyspy_error": None, "result": None}
    env = repo_env()
    with tempfile.TemporaryDirectory(prefix="gpumon-corpus-") as control, tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            job_command(seed, plan, args, control),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=lines_of, args=(process.stdout, lines), daemon=True).start()
        deadline = time.monotonic() + args.job_timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    break
                if line is None:
                    break
                if line.startswith("PHASE diagnose-"):
                    name = line.split()[1]
                    pid = phase_pid(line)
                    if pid is not None and float(line.rsplit("seconds=", 1)[-1]) > 0:
                        pyspy = name == "diagnose-pyspy"
                        log(f"  {name}: gpumon diagnose --pid {pid}{' --pyspy' if pyspy else ''} ...")
                        found, error = diagnose(pid, args.duration, pyspy)
                        out["pyspy" if pyspy else "hook"], out[f"{'pyspy' if pyspy else 'hook'}_error"] = found, error
                    Path(control, f"{name}.done").touch()
                elif line.startswith('{"generated"'):
                    out["result"] = json.loads(line)
            if out["result"] is None and time.monotonic() >= deadline:
                out["error"] = f"killed after {args.job_timeout:g} s"
            try:
                process.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                pass
        finally:
            kill_group(process)
            errors.seek(0)
            tail = [line for line in errors.read().splitlines() if line.strip() and "NumPy" not in line]
            out["stderr_tail"] = tail[-5:]
            out["returncode"] = process.returncode
    return out


def scenario_of(plan: Plan, result: Mapping[str, Any]) -> tuple[Scenario, dict[str, float | None]]:
    """The job as scenario_truth sees it: one cause per family (scored where it was ablated), the expected top."""
    truth: dict[str, float | None] = dict(result.get("truth") or {})
    unsupported = result.get("unsupported") or {}
    causes = tuple(
        Cause(family, category, scored=family in truth and family not in unsupported)
        for family, category in measured_causes(truth, plan)
    )
    expected = expected_category(truth, plan, MIN_SEVERITY)
    either = either_of(truth, plan, MIN_SEVERITY)
    if either:
        expected = either[0]
    scenario = Scenario(f"seed {plan.seed}", expected, causes, combine=True, ranks=plan.ranks, either=either)
    return scenario, truth


def row_for(seed: int, plan: Plan, ran: Mapping[str, Any]) -> dict[str, Any]:
    result = ran.get("result")
    causes = [{"family": c.family, "magnitude": c.magnitude, "params": dict(c.params)} for c in plan.causes]
    if not result:
        why = ran.get("error") or "; ".join(ran.get("stderr_tail") or ()) or f"exit {ran.get('returncode')}"
        return {"seed": seed, "causes": causes, "skipped": why, "plan": plan.to_dict()}
    scenario, truth = scenario_of(plan, result)
    hook, pyspy = ran.get("hook"), ran.get("pyspy")
    row = score(scenario, truth, hook and hook.get("finding"), pyspy and pyspy.get("finding"), TOLERANCE)
    row.update(
        seed=seed,
        causes=causes,
        either=list(scenario.either),
        unsupported=result.get("unsupported") or {},
        rates=result.get("rates"),
        median_samples_per_s=result.get("median_samples_per_s"),
        hook_diagnosis=summary(hook) if hook else {"error": ran.get("hook_error")},
        pyspy_diagnosis=summary(pyspy) if pyspy else {"error": ran.get("pyspy_error")},
        plan=plan.to_dict(),
    )
    return row


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def verdict(scored: Mapping[str, Any] | None, diagnosis: Mapping[str, Any] | None) -> str:
    if not scored:
        return f"- ({(diagnosis or {}).get('error') or 'not run'})"[:80]
    severity = (diagnosis or {}).get("severity")
    return f"{scored['category']} {_pct(severity)}" if scored["category"] != HEALTHY else HEALTHY


def right(scored: Mapping[str, Any] | None) -> str:
    if not scored:
        return "-"
    ok = scored["top_ok"] and scored["all_within"] is not False
    return "right" if ok else "wrong"


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| seed | causes (magnitude) | truth per ablation | expected | hooked | py-spy | hooked / py-spy |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        causes = ", ".join(f"{c['family']} {c['magnitude']:.2f}" for c in row["causes"]) or "none"
        if row.get("skipped"):
            lines.append(f"| {row['seed']} | {causes} | skipped: {row['skipped'][:120]} | - | - | - | - |")
            continue
        truth = ", ".join(f"{key} {_pct(value)}" for key, value in row["truth"].items()) or "-"
        hook = verdict(row["hook"], row.get("hook_diagnosis"))
        spy = verdict(row["pyspy"], row.get("pyspy_diagnosis"))
        expected = " or ".join(row.get("either") or [row["expected"]])
        lines.append(
            f"| {row['seed']} | {causes} | {truth} | {expected} | {hook} | {spy} "
            f"| {right(row['hook'])} / {right(row['pyspy'])} |"
        )
    return "\n".join(lines) + "\n"


def totals(rows: Sequence[Mapping[str, Any]], source: str) -> dict[str, Any]:
    """One source's summary (hook or pyspy) over the scored rows."""
    scored = [row for row in rows if not row.get("skipped") and row.get(source)]
    within = [ok for row in scored for ok in row[source]["within"].values()]
    healthy = [row for row in scored if row["expected"] == HEALTHY]
    return {
        "jobs": len(scored),
        "top_right": sum(row[source]["top_ok"] for row in scored),
        "top_right_pct": round(100 * sum(row[source]["top_ok"] for row in scored) / len(scored), 1) if scored else None,
        "shares": len(within),
        "shares_within": sum(within),
        "shares_within_pct": round(100 * sum(within) / len(within), 1) if within else None,
        "healthy_missed": sum(bool(row[source].get("healthy_missed")) for row in scored),
        "healthy_jobs": len(healthy),
        "false_alarms": sum(bool(row[source]["false_alarm"]) for row in healthy),
    }


PYSPY_BLIND = frozenset({"gc_bound", "allocator_churn"})
"""Categories py-spy cannot see without --native (which pauses the job at each sample): the garbage collector and the
caching allocator's cudaMalloc/cudaFree run in C below the Python line that set them off, so their samples land on
that line. The issue's py-spy target counts the jobs where py-spy can see."""


def pyspy_can_see(row: Mapping[str, Any]) -> bool:
    """Whether the job's expected category (or any it may be named by) is one py-spy can see."""
    return not ({row.get("expected"), *(row.get("either") or [])} & PYSPY_BLIND)


def summarize(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    hook, pyspy = totals(rows, "hook"), totals(rows, "pyspy")
    ratio = round(pyspy["top_right"] / hook["top_right"], 3) if hook["top_right"] else None
    visible = [row for row in rows if pyspy_can_see(row)]
    hook_seen, pyspy_seen = totals(visible, "hook"), totals(visible, "pyspy")
    seen_ratio = round(pyspy_seen["top_right"] / hook_seen["top_right"], 3) if hook_seen["top_right"] else None
    return {
        "jobs": len(rows),
        "skipped": sum(bool(row.get("skipped")) for row in rows),
        "hook": hook,
        "pyspy": pyspy,
        "pyspy_over_hook_top_right": ratio,
        "pyspy_blind_jobs": hook["jobs"] - hook_seen["jobs"],
        "pyspy_over_hook_top_right_where_it_sees": seen_ratio,
    }


def summary_text(total: Mapping[str, Any]) -> str:
    lines = [f"{total['jobs']} jobs, {total['skipped']} skipped."]
    for source, name in (("hook", "hooked"), ("pyspy", "py-spy")):
        t = total[source]
        lines.append(
            f"- {name}: top category right {t['top_right']} of {t['jobs']} ({t['top_right_pct']}%); shares within "
            f"{TOLERANCE * 100:.0f} points {t['shares_within']} of {t['shares']} ({t['shares_within_pct']}%); healthy "
            f"where an ablation gives back >= {RECOVERABLE * 100:.0f}%: {t['healthy_missed']}; false alarms on "
            f"healthy jobs: {t['false_alarms']} of {t['healthy_jobs']}"
        )
    lines.append(f"- py-spy's top-category score as a fraction of the hooked one: {total['pyspy_over_hook_top_right']}")
    if "pyspy_over_hook_top_right_where_it_sees" in total:
        lines.append(
            f"- the same where py-spy can see (without the {total['pyspy_blind_jobs']} jobs whose cause is the "
            f"collector or the allocator): {total['pyspy_over_hook_top_right_where_it_sees']}"
        )
    return "\n".join(lines) + "\n"


def write(out: Path | None, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    total = summarize(rows)
    text = markdown(rows) + "\n" + summary_text(total)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": meta, "summary": total, "rows": list(rows)}, indent=1) + "\n")
        header = f"{meta['devices']}; {meta['date']}; commit {meta['commit']}; `{meta['command']}`\n\n"
        out.with_suffix(".md").write_text(header + text)
    return text


def merge(paths: Sequence[Path], out: Path | None) -> int:
    """The rows of several runs (e.g. one runner per GPU, CUDA_VISIBLE_DEVICES) scored as one corpus."""
    metas, rows = [], []
    for path in paths:
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            metas.append(document["meta"])
            rows.extend(document["rows"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"scenario_corpus: cannot merge {path}: {error}", file=sys.stderr)
            return 2
    rows.sort(key=lambda row: row.get("seed", 0))
    meta = dict(metas[0])
    meta["command"] = " ; ".join(str(m.get("command")) for m in metas)
    meta["merged"] = [str(path) for path in paths]
    print(write(out, meta, rows), end="")
    return 0


def seeds_of(args: argparse.Namespace) -> list[int]:
    if args.seed:
        return list(args.seed)
    return list(SEED_SETS[args.set])[args.start : args.start + args.count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SEED_SETS), default="tune", help="tune (0-99) or heldout (1000-1999)")
    parser.add_argument("--count", type=int, default=10, help="seeds of the set to run (default 10)")
    parser.add_argument("--start", type=int, default=0, help="skip this many seeds of the set first")
    parser.add_argument("--seed", type=int, action="append", default=[], help="these seeds instead (repeatable)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds each diagnosis watches (default 6)")
    parser.add_argument("--warmup", type=float, default=3.0, help="the job's warm-up in seconds (default 3)")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per timed window (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="windows per variant (default 3)")
    parser.add_argument("--no-pyspy", action="store_true", help="only the hooked diagnosis")
    parser.add_argument("--job-timeout", type=float, default=240.0, help="a job's limit in seconds (default 240)")
    parser.add_argument("--out", type=Path, default=None, help="results JSON (and the table beside it, .md)")
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=[],
        help="no run: these results JSONs (runners on separate GPUs) "
        "as one table and summary in --out, their rows in seed order",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    names = device_names()
    gpus = len(names) or (gpu_count() if args.device != "cpu" else 0)
    meta = {
        "date": datetime.date.today().isoformat(),
        "devices": f"{names[0]} x{len(names)}" if names else "no GPU",
        "commit": commit(),
        "command": " ".join(["python", "benchmarks/scenario_corpus.py", *(argv if argv is not None else sys.argv[1:])]),
        "diagnose_duration_s": args.duration,
        "window_s": args.window,
        "rounds": args.rounds,
        "tolerance": TOLERANCE,
    }
    log(f"{meta['devices']}; {meta['date']}; commit {meta['commit']}")
    rows: list[dict[str, Any]] = []
    for seed in seeds_of(args):
        plan = make_plan(seed, tiny=args.device == "cpu" or (args.device == "auto" and not gpus))
        log(f"seed {seed}: {plan.model}, batch {plan.batch}, causes {plan.families or 'none'}")
        if plan.ranks > 1 and args.device != "cpu" and gpus < plan.ranks:
            causes = [{"family": c.family, "magnitude": c.magnitude, "params": dict(c.params)} for c in plan.causes]
            rows.append({"seed": seed, "causes": causes, "skipped": f"needs {plan.ranks} GPUs", "plan": plan.to_dict()})
            write(args.out, meta, rows)
            continue
        started = time.monotonic()
        ran = run_job(seed, plan, args, log)
        row = row_for(seed, plan, ran)
        row["wall_s"] = round(time.monotonic() - started, 1)
        rows.append(row)
        if row.get("skipped"):
            log(f"seed {seed}: no result: {row['skipped']}")
        else:
            log(
                f"seed {seed}: truth {row['truth']}; expected {row['expected']}; hooked "
                f"{(row['hook'] or {}).get('category') or ran.get('hook_error')}; py-spy "
                f"{(row['pyspy'] or {}).get('category') or ran.get('pyspy_error')} ({row['wall_s']} s)"
            )
        write(args.out, meta, rows)
    print(write(args.out, meta, rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
