"""Proof against truth: each scenario of benchmarks/scenarios timed with each cause removed, then diagnosed by gpumon.

Usage (repo root, on the GPU machine):

    python benchmarks/scenario_truth.py --out benchmarks/results/scenario-truth-h200-DATE.json
    python benchmarks/scenario_truth.py --only logging_sync --only fp32_matmul --out /tmp/two.json

For each scenario: the baseline and each --fix variant (and, for the two-cause ones, both fixes at once) run in
turn, --rounds times alternated; the truth of a cause is its share of the time per sample, 1 - t_fixed / t_base
over the medians (the time per step wherever the fix keeps the batch; launch_bound's bigger_batch does not). Then
`gpumon diagnose --json` on the baseline twice: hooked (gpumon runs the job) and by py-spy (the job started plainly,
`--pid`). The scoring (top category expected vs named, the share diagnosed within 10 points of the truth, a false
alarm on a healthy job) is the pure function score(). A scenario that exits 3 is reported as skipped, as is
ddp_manual_allreduce (torchrun, 2 ranks) with fewer than 2 GPUs; a run past its time limit has its process group
killed. The results go to --out (JSON) and its .md sibling (the table), written after each scenario.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCENARIO_DIR = REPO / "benchmarks" / "scenarios"
EXIT_NOT_HERE = 3
TOLERANCE = 0.10
"""A diagnosed share counts as right within 10 points of the truth."""
HEALTHY = "healthy"
MIN_SEVERITY = 0.15
"""gpumon.advisor.rules.MIN_SEVERITY (tests/test_scenario_scoring.py keeps them equal): a cause costing less is not
named, so a scenario whose measured causes all cost less should be diagnosed healthy."""
BASE = "base"
RECOVERABLE = 0.20
"""A healthy verdict on a job where some ablation gives back this share or more is a miss (the generated corpus)."""


@dataclass(frozen=True)
class Cause:
    """One cause of a scenario: the --fix that removes it and the category gpumon should name for it. `scored`:
    its truth is what the diagnosed share is held to (launch_bound's bigger_batch changes the work, so is not)."""

    fix: str
    category: str
    scored: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str
    causes: tuple[Cause, ...] = ()
    combine: bool = False
    """Also time all the fixes at once (the two-cause scenarios)."""
    ranks: int = 1
    either: tuple[str, ...] = ()
    """Categories each right as the top where no cause alone gives back the bar but all removed together do: each
    cause is enough to bound the job, so naming any of them is right (set from the measured truth)."""

    @property
    def variants(self) -> list[tuple[str, ...]]:
        """The runs of the ablation: () the baseline, then each fix alone, then all of them where `combine`."""
        out: list[tuple[str, ...]] = [()] + [(cause.fix,) for cause in self.causes]
        if self.combine and len(self.causes) > 1:
            out.append(tuple(sorted(cause.fix for cause in self.causes)))
        return out


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("cpu_preprocess", "cpu_bound", (Cause("gpu_preprocess", "cpu_bound"),)),
        Scenario("logging_sync", "host_sync", (Cause("no_sync", "host_sync"),)),
        Scenario(
            "loader_bound",
            "input_bound",
            (Cause("cached", "input_bound"), Cause("workers", "input_bound", scored=False)),
        ),
        Scenario("main_process_loading", "input_bound", (Cause("workers", "input_bound"),)),
        Scenario("pageable_copy", "transfer_bound", (Cause("pinned", "transfer_bound"),)),
        Scenario(
            "launch_bound",
            "launch_bound",
            (Cause("cuda_graph", "launch_bound"), Cause("bigger_batch", "launch_bound", scored=False)),
        ),
        Scenario("fp32_matmul", "low_precision", (Cause("bf16", "low_precision"),)),
        Scenario(
            "two_cause_loader_sync",
            "input_bound",
            (
                Cause("cached", "input_bound"),
                Cause("workers", "input_bound", scored=False),
                Cause("no_sync", "host_sync"),
            ),
            combine=True,
        ),
        Scenario(
            "two_cause_cpu_sync",
            "cpu_bound",
            (Cause("gpu_preprocess", "cpu_bound"), Cause("no_sync", "host_sync")),
            combine=True,
        ),
        Scenario(
            "ddp_manual_allreduce",
            "comm_bound",
            (Cause("no_comm", "comm_bound"), Cause("ddp", "comm_bound", scored=False)),
            ranks=2,
        ),
        Scenario("healthy_bf16", HEALTHY),
        Scenario("healthy_conv", HEALTHY),
        Scenario("healthy_transformer", HEALTHY),
    )
}


def variant_key(fixes: Sequence[str]) -> str:
    return "+".join(sorted(fixes)) or BASE


# ---------------------------------------------------------------------------------------------
# Scoring: pure functions of the measured times and the findings.


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def truth_shares(times: Mapping[str, Sequence[float]]) -> dict[str, float | None]:
    """Each variant's share of the baseline's time per sample, 1 - median(t_variant) / median(t_base); None where
    either has no run."""
    base = median(times.get(BASE, ()))
    out: dict[str, float | None] = {}
    for key, values in times.items():
        if key == BASE:
            continue
        fixed = median(values)
        out[key] = None if base is None or fixed is None or base <= 0 else 1.0 - fixed / base
    return out


def diagnosed_share(finding: Mapping[str, Any] | None, category: str) -> float:
    """The share of the step gpumon gives `category`: the severity of the finding of that category, the primary or
    a secondary one; 0 where it names none."""
    if not finding:
        return 0.0
    found = [finding, *(finding.get("secondary") or ())]
    shares = [float(f.get("severity") or 0.0) for f in found if f.get("category") == category]
    return max(shares, default=0.0)


def expected_top(scenario: Scenario, truth: Mapping[str, float | None]) -> str:
    """The category the diagnosis should name: the scenario's, unless no scored cause's measured share reaches the
    advisor's bar for naming a cause (rules.MIN_SEVERITY); then healthy, as the advisor's own rule says."""
    scored = [truth.get(cause.fix) for cause in scenario.causes if cause.scored]
    measured = [share for share in scored if share is not None]
    if scenario.expected == HEALTHY or scenario.either or not measured or max(measured) >= MIN_SEVERITY:
        return scenario.expected
    return HEALTHY


def score_source(
    scenario: Scenario, truth: Mapping[str, float | None], finding: Mapping[str, Any] | None, tolerance: float
) -> dict[str, Any] | None:
    """One diagnosis (hooked or py-spy) against the truth; None where there was no finding."""
    if finding is None:
        return None
    expected = expected_top(scenario, truth)
    category = finding.get("category")
    shares: dict[str, float] = {}
    within: dict[str, bool] = {}
    for cause in scenario.causes:
        shares[cause.fix] = round(diagnosed_share(finding, cause.category), 3)
        true_share = truth.get(cause.fix)
        if cause.scored and true_share is not None:
            within[cause.fix] = abs(shares[cause.fix] - max(0.0, true_share)) <= tolerance + 1e-9
    return {
        "category": category,
        "top_ok": category == expected or (expected != HEALTHY and category in scenario.either),
        "shares": shares,
        "within": within,
        "all_within": all(within.values()) if within else None,
        "false_alarm": (category != HEALTHY) if expected == HEALTHY else None,
        "healthy_missed": category == HEALTHY and recoverable(truth) >= RECOVERABLE,
    }


def recoverable(truth: Mapping[str, float | None]) -> float:
    """The most any variant of the ablation gives back (each fix alone, or all at once); 0 where none does."""
    return max((share for share in truth.values() if share is not None), default=0.0)


def score(
    scenario: Scenario,
    truth: Mapping[str, float | None],
    hook: Mapping[str, Any] | None,
    pyspy: Mapping[str, Any] | None,
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """The scenario's row: the truth per cause (and all fixes at once), and each diagnosis scored against it.
    A negative truth (the fix made it slower) is held as 0 when compared with a diagnosed share."""
    return {
        "scenario": scenario.name,
        "expected": expected_top(scenario, truth),
        "truth": {key: None if value is None else round(value, 3) for key, value in truth.items()},
        "hook": score_source(scenario, truth, hook, tolerance),
        "pyspy": score_source(scenario, truth, pyspy, tolerance),
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table of scored rows (skipped rows say why)."""
    lines = [
        "| scenario | truth per cause | top expected | hook | py-spy | share diagnosed vs truth (hook / py-spy) "
        "| within 10 points (hook / py-spy) | false alarm (hook / py-spy) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if row.get("skipped"):
            lines.append(
                f"| {row['scenario']} | skipped: {row['skipped']} | {row.get('expected', '-')} | - | - | - | - | - |"
            )
            continue
        truth = row.get("truth") or {}
        hook, pyspy = row.get("hook"), row.get("pyspy")
        truth_text = ", ".join(f"{key} {_pct(value)}" for key, value in truth.items()) or "-"
        shares = []
        fixes = list((hook or pyspy or {}).get("shares", {}))
        for fix in fixes:
            hook_share = hook["shares"].get(fix) if hook else None
            spy_share = pyspy["shares"].get(fix) if pyspy else None
            shares.append(f"{fix}: {_pct(hook_share)} / {_pct(spy_share)} vs {_pct(truth.get(fix))}")
        within = f"{_yes_no(hook and hook['all_within'])} / {_yes_no(pyspy and pyspy['all_within'])}"
        alarm = f"{_yes_no(hook and hook['false_alarm'])} / {_yes_no(pyspy and pyspy['false_alarm'])}"
        if row["expected"] != HEALTHY:
            alarm = "-"
        else:
            within = "-"
        lines.append(
            f"| {row['scenario']} | {truth_text} | {row['expected']} | {(hook or {}).get('category') or '-'} "
            f"| {(pyspy or {}).get('category') or '-'} | {'; '.join(shares) or '-'} | {within} | {alarm} |"
        )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Running the jobs.


@dataclass
class Outcome:
    returncode: int | None
    """None: killed at its time limit."""
    stdout: str
    stderr: str

    @property
    def tail(self) -> str:
        lines = [line for line in self.stderr.strip().splitlines() if "NumPy" not in line and line.strip()]
        return lines[-1] if lines else ""


def kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the job's process group (it runs in its own session), SIGKILL if it lingers."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def repo_env() -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH: the jobs and gpumon import from the working tree."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def run(command: Sequence[str], timeout: float) -> Outcome:
    """Run `command` in its own session; kill its process group past `timeout` seconds."""
    process = subprocess.Popen(
        list(command),
        cwd=REPO,
        env=repo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        return Outcome(process.returncode, stdout, stderr)
    except subprocess.TimeoutExpired:
        kill_group(process)
        stdout, stderr = process.communicate()
        return Outcome(None, stdout, stderr + f"\nkilled after {timeout:.0f} s")


def result_line(stdout: str) -> dict[str, Any] | None:
    """The scenario's JSON line (its last line that parses as one)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{") and '"scenario"' in line:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict):
                return data
    return None


def job_command(scenario: Scenario, duration: float, fixes: Sequence[str], device: str) -> list[str]:
    script = str(SCENARIO_DIR / f"{scenario.name}.py")
    args = [script, "--duration", f"{duration:g}", "--device", device, *(a for fix in fixes for a in ("--fix", fix))]
    if scenario.ranks > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        return [*launcher, "--nproc-per-node", str(scenario.ranks), *args]
    return [sys.executable, *args]


def gpu_count() -> int:
    try:
        out = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return int(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return 0


def measure(scenario: Scenario, rounds: int, duration: float, device: str, log: Any) -> dict[str, Any]:
    """The ablation: every variant run `rounds` times, alternated; per run its JSON line."""
    runs: dict[str, list[dict[str, Any]]] = {variant_key(v): [] for v in scenario.variants}
    skipped: dict[str, str] = {}
    for round_ in range(rounds):
        for fixes in scenario.variants:
            key = variant_key(fixes)
            if key in skipped:
                continue
            outcome = run(job_command(scenario, duration, fixes, device), timeout=duration + 180)
            line = result_line(outcome.stdout)
            if outcome.returncode == EXIT_NOT_HERE or (line is None and "not runnable here" in outcome.stderr):
                skipped[key] = outcome.tail
                log(f"  {key}: skipped: {outcome.tail}")
                continue
            if outcome.returncode != 0 or line is None or not line.get("samples_per_s"):
                runs[key].append({"error": outcome.tail or f"exit {outcome.returncode}"})
                log(f"  {key} round {round_ + 1}: failed: {outcome.tail or outcome.returncode}")
                continue
            runs[key].append(line)
            log(f"  {key} round {round_ + 1}: {line['step_ms']} ms a step, {line['samples_per_s']} samples/s")
    times = {
        key: [1.0 / line["samples_per_s"] for line in lines if line.get("samples_per_s")]
        for key, lines in runs.items()
        if key not in skipped
    }
    step_ms = {key: median([line["step_ms"] for line in lines if line.get("step_ms")]) for key, lines in runs.items()}
    return {
        "runs": runs,
        "skipped": skipped,
        "median_step_ms": step_ms,
        "median_s_per_sample": {key: median(values) for key, values in times.items()},
        "truth": truth_shares(times),
    }


BREAKDOWN_KEYS = (
    "budget_steps",
    "budget_syncs_per_step",
    "gpu_util",
    "sm_activity",
    "tensor_activity",
    "device",
    "step_shares",
    "step_busy_from",
    "step_samples",
    "idle_lines",
    "idle_line_shares",
)


def summary(diagnosis: Mapping[str, Any]) -> dict[str, Any]:
    """What the table keeps of `gpumon diagnose --json`: the finding, its secondaries, the step breakdown (every
    *_share signal, whatever the hook's budget names) and the whole signals, which the advisor's recorded-signal
    tests replay (tests/advisor/test_scenario_signals.py)."""
    finding = diagnosis.get("finding") or {}
    signals = diagnosis.get("signals") or {}
    return {
        "category": finding.get("category"),
        "confidence": finding.get("confidence"),
        "severity": finding.get("severity"),
        "evidence": finding.get("evidence"),
        "numbers": finding.get("numbers"),
        "source": finding.get("source"),
        "secondary": [
            {key: s.get(key) for key in ("category", "confidence", "severity", "evidence")}
            for s in finding.get("secondary") or ()
        ],
        "breakdown": {key: value for key, value in signals.items() if key.endswith("_share") or key in BREAKDOWN_KEYS},
        "signals": signals,
    }


def parse_diagnosis(outcome: Outcome) -> tuple[dict[str, Any] | None, str | None]:
    if outcome.returncode != 0:
        return None, outcome.tail or f"exit {outcome.returncode}"
    try:
        return json.loads(outcome.stdout), None
    except json.JSONDecodeError:
        return None, "gpumon diagnose printed no JSON"


def diagnose_hooked(scenario: Scenario, duration: float, device: str) -> tuple[dict[str, Any] | None, str | None]:
    command = [sys.executable, "-m", "gpumon", "diagnose", "--json", "--duration", f"{duration:g}", "--"]
    return parse_diagnosis(run(command + job_command(scenario, duration + 10, (), device), timeout=duration + 300))


def rank_zero(launcher: int, script: str, wait: float) -> int | None:
    """The pid of torchrun's first rank running `script` (the lowest), within `wait` seconds."""
    import psutil

    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            children = psutil.Process(launcher).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        ranks = []
        for child in children:
            try:
                if script in " ".join(child.cmdline()) and "torch.distributed.run" not in " ".join(child.cmdline()):
                    ranks.append(child.pid)
            except psutil.Error:
                continue
        if ranks:
            return min(ranks)
        time.sleep(0.5)
    return None


def diagnose_pyspy(
    scenario: Scenario, duration: float, device: str, attach_after: float
) -> tuple[dict[str, Any] | None, str | None]:
    """The job started plainly (no hook), then `gpumon diagnose --pid` on it (py-spy), then its group killed."""
    command = job_command(scenario, duration + attach_after + 30, (), device)
    with tempfile.TemporaryFile("w+") as errors:
        job = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=errors, text=True, start_new_session=True
        )
        try:
            time.sleep(attach_after)
            if job.poll() is not None:
                errors.seek(0)
                return None, f"the job ended before the attach (exit {job.returncode}): {errors.read()[-300:]}"
            pid: int | None = job.pid
            if scenario.ranks > 1:
                pid = rank_zero(job.pid, str(SCENARIO_DIR / f"{scenario.name}.py"), 30.0)
                if pid is None:
                    return None, "no rank found under torchrun"
            diagnose = [sys.executable, "-m", "gpumon", "diagnose", "--json", "--pid", str(pid)]
            return parse_diagnosis(run([*diagnose, "--duration", f"{duration:g}"], timeout=duration + 300))
        finally:
            kill_group(job)


def device_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(" (UUID")[0] for line in out.stdout.splitlines() if line.startswith("GPU ")]


def commit() -> str | None:
    """The tree's commit: GPUMON_TREE where given (a copy whose git names another commit), else git's."""
    if os.environ.get("GPUMON_TREE"):
        return os.environ["GPUMON_TREE"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def write(out: Path | None, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    table = markdown_table(rows)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=1) + "\n")
        header = f"{meta['devices']}; {meta['date']}; commit {meta['commit']}; `{meta['command']}`\n\n"
        out.with_suffix(".md").write_text(header + table)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], choices=sorted(SCENARIOS), help="(repeatable)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant, alternated (default 2)")
    parser.add_argument("--truth-duration", type=float, default=15.0, help="seconds per timed run (default 15)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds gpumon diagnoses (default 20)")
    parser.add_argument("--attach-after", type=float, default=8.0, help="py-spy: seconds before attaching (default 8)")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="passed to the scenarios")
    parser.add_argument("--no-diagnose", action="store_true", help="only the ablation (the truth)")
    parser.add_argument("--out", type=Path, default=None, help="results JSON (and the table beside it, .md)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    names = device_names()
    meta = {
        "date": datetime.date.today().isoformat(),
        "devices": f"{names[0]} x{len(names)}" if names else "no GPU",
        "commit": commit(),
        "command": " ".join(["python", "benchmarks/scenario_truth.py", *(argv if argv is not None else sys.argv[1:])]),
        "rounds": args.rounds,
        "truth_duration_s": args.truth_duration,
        "diagnose_duration_s": args.duration,
        "tolerance": TOLERANCE,
    }
    log(f"{meta['devices']}; {meta['date']}; commit {meta['commit']}")
    gpus = len(names)
    rows: list[dict[str, Any]] = []
    for name in args.only or list(SCENARIOS):
        scenario = SCENARIOS[name]
        log(f"{name}: timing {len(scenario.variants)} variants x {args.rounds} rounds ...")
        if scenario.ranks > 1 and args.device != "cpu" and (gpus or gpu_count()) < scenario.ranks:
            rows.append({"scenario": name, "expected": scenario.expected, "skipped": f"needs {scenario.ranks} GPUs"})
            log(f"{name}: skipped: needs {scenario.ranks} GPUs")
            write(args.out, meta, rows)
            continue
        ablation = measure(scenario, args.rounds, args.truth_duration, args.device, log)
        if BASE in ablation["skipped"]:
            rows.append({"scenario": name, "expected": scenario.expected, "skipped": ablation["skipped"][BASE]})
            write(args.out, meta, rows)
            continue
        hook = pyspy = None
        hook_error: str | None = "not run (--no-diagnose)"
        pyspy_error: str | None = hook_error
        if not args.no_diagnose:
            log(f"{name}: gpumon diagnose (hooked) ...")
            hook, hook_error = diagnose_hooked(scenario, args.duration, args.device)
            log(f"{name}: gpumon diagnose --pid (py-spy) ...")
            pyspy, pyspy_error = diagnose_pyspy(scenario, args.duration, args.device, args.attach_after)
        row = score(
            scenario, ablation["truth"], hook and hook.get("finding"), pyspy and pyspy.get("finding"), TOLERANCE
        )
        row.update(
            ablation=ablation,
            hook_diagnosis=summary(hook) if hook else {"error": hook_error},
            pyspy_diagnosis=summary(pyspy) if pyspy else {"error": pyspy_error},
        )
        rows.append(row)
        log(
            f"{name}: truth {row['truth']}; hook {(row['hook'] or {}).get('category') or hook_error}; "
            f"py-spy {(row['pyspy'] or {}).get('category') or pyspy_error}"
        )
        write(args.out, meta, rows)
    print(write(args.out, meta, rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
