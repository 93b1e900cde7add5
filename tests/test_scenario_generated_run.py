"""Generated jobs run as processes on the CPU: their phases, their truth line, a comm job refused outside torchrun."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.scenarios.generated.plan import TUNE_SEEDS, make_plan

pytestmark = pytest.mark.slow  # a few jobs of a few seconds each, torch imported by each

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "benchmarks" / "scenarios" / "generated" / "job.py"
QUICK = ["--device", "cpu", "--warmup", "0.3", "--hook-phase", "0.3", "--pyspy-phase", "0", "--window", "0.3"]


def run_job(seed: int, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("WORLD_SIZE", None)
    command = [sys.executable, str(JOB), "--seed", str(seed), *QUICK, "--rounds", "1", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, cwd=REPO)


def test_a_job_with_two_causes_prints_its_phases_and_its_truth() -> None:
    plan = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if len(p.causes) == 2 and p.ranks == 1)
    done = run_job(plan.seed)
    assert done.returncode == 0, done.stderr[-2000:]
    phases = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("PHASE ")]
    assert phases == ["warmup", "diagnose-hook", "diagnose-pyspy", "truth"]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["generated"] == plan.seed and result["families"] == plan.families
    runnable = [f for f in plan.families if f not in result["unsupported"]]
    assert set(result["truth"]) == set(runnable) | ({"+".join(sorted(runnable))} if len(runnable) > 1 else set())
    assert all(rate > 0 for rates in result["rates"].values() for rate in rates)


def test_a_job_ends_its_phase_when_the_runner_says_so(tmp_path: Path) -> None:
    healthy = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if not p.causes)
    (tmp_path / "diagnose-hook.done").touch()
    done = run_job(healthy.seed, "--control", str(tmp_path), "--phase-cap", "60")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["truth"] == {} and list(result["rates"]) == ["base"]


def test_a_comm_job_outside_torchrun_is_not_runnable_here() -> None:
    comm = next(p for p in (make_plan(s) for s in range(3000)) if p.ranks == 2)
    done = run_job(comm.seed)
    assert done.returncode == 3 and "not runnable here" in done.stderr
