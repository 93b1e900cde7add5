"""benchmarks/guided_vs_sweep.py: its ladder, its planner narrowed to num_workers (the climb kept), and a real run on
this machine's CPU (loader_bound.py as trial runs) whose JSON holds together. No speed is asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.guided_vs_sweep import default_ladder, knob_planner
from gpumon.advisor.categories import INPUT_BOUND
from gpumon.advisor.guided import default_planner
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import SOURCE_HOOK, GpuSignals, Signals

REPO = Path(__file__).resolve().parents[2]
BENCHMARK = REPO / "benchmarks" / "guided_vs_sweep.py"
CORES = 16


def loader_bound_job(workers: int) -> Signals:
    """A GPU job waiting for its augmenting workers (each a busy core), with the DataLoader's other knobs at their
    defaults, so the full plan also proposes prefetch_factor and persistent_workers."""
    rate = 50.0 * workers
    return Signals.of(
        source=SOURCE_HOOK,
        device="cuda",
        gpus=(GpuSignals(index=0, name="NVIDIA H200", utilization=rate / 10),),
        gpu_util=rate / 10,
        steps=200,
        data_share=1 - rate / 1000,
        samples_per_s=rate,
        num_workers=workers,
        pin_memory=True,
        prefetch_factor=2,
        persistent_workers=False,
        batch_size=64,
        worker_cpu=tuple(100.0 for _ in range(workers)),
        cores=CORES,
        idle_cores=CORES - workers - 1,
    )


def test_the_default_ladder_ends_at_the_cores_less_two_and_the_cores() -> None:
    assert default_ladder(32) == [0, 1, 2, 4, 8, 12, 16, 24, 30, 32]
    assert default_ladder(16) == [0, 1, 2, 4, 8, 12, 14, 16]
    assert default_ladder(2) == [0, 1, 2]


def test_the_narrowed_planner_keeps_the_climb_and_drops_the_other_loader_knobs() -> None:
    full = default_planner(CORES)
    narrowed = knob_planner("num_workers", full)
    signals = loader_bound_job(2)
    finding = diagnose(signals)
    assert finding.category == INPUT_BOUND
    assert {name for experiment in full(finding, signals, {}) for name in experiment.knobs} >= {
        "num_workers",
        "prefetch_factor",
        "persistent_workers",
    }
    steps = []
    kept: dict[str, int] = {}
    workers = 2
    for _ in range(5):
        signals = loader_bound_job(workers)
        planned = narrowed(diagnose(signals), signals, kept)
        assert all(set(experiment.knobs) == {"num_workers"} for experiment in planned)
        if not planned:
            break
        workers = planned[0].knobs["num_workers"]
        steps.append(workers)
        kept = {"num_workers": workers}
    assert steps == [4, 8, 14], "2 -> 4 -> 8 -> the cores less two, then nothing left to climb"


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCHMARK), "--window", "0"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and "--window must be positive" in run.stderr


@pytest.mark.slow
def test_a_tiny_run_on_the_cpu_measures_both_halves_and_its_summary_follows_from_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCHMARK),
            "--device",
            "cpu",
            "--workers",
            "0",
            "2",
            "--window",
            "1",
            "--warmup",
            "1",
            "--repeats",
            "2",
            "--json",
            str(tmp_path / "result.json"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads((tmp_path / "result.json").read_text())
    assert data == json.loads((out / "guided_vs_sweep.json").read_text())
    assert set(data) == {"meta", "guided", "sweep", "summary"}
    meta = data["meta"]
    assert meta["date"] and meta["device"] and meta["cores"] >= 1 and meta["ladder"] == [0, 2]
    assert meta["plan"] == {"warmup_s": 1.0, "window_s": 1.0, "repeats": 2}

    sweep = {row["workers"]: row for row in data["sweep"]}
    assert sorted(sweep) == [0, 2]
    for row in sweep.values():
        assert row["status"] == "ok", row
        assert row["measurement"]["unit"] == "samples/s" and row["measurement"]["rate"] > 0
        assert 1 <= row["measurement"]["windows"] <= 2
    assert sweep[0]["applied"] == {"num_workers": "hook"}, "the hook set it on the script's own DataLoader"
    assert sweep[2]["speedup"] == 1.0, "the job as it is: the base of the speed-ups"
    assert sweep[0]["speedup"] == pytest.approx(
        sweep[0]["measurement"]["rate"] / sweep[2]["measurement"]["rate"], abs=0.002
    )

    guided = data["guided"]
    assert guided["speedup"] > 0 and guided["wall_s"] > 0 and guided["trial_starts"] >= 1
    assert guided["final_workers"] in sweep, "where the guided run ended was measured by the sweep"
    assert all(set(variant) >= {"label", "workers", "status", "kept", "speedup"} for variant in guided["variants"])

    summary = data["summary"]
    best = max(sweep.values(), key=lambda row: row["speedup"])
    assert summary["best_sweep_workers"] == best["workers"] and summary["best_sweep_speedup"] == best["speedup"]
    assert summary["guided_speedup"] == guided["speedup"] and summary["guided_workers"] == guided["final_workers"]
    assert summary["speedup_ratio"] == pytest.approx(guided["speedup"] / best["speedup"], abs=0.002)
    at_guided = sweep[guided["final_workers"]]["speedup"]
    assert summary["landing_ratio"] == pytest.approx(at_guided / best["speedup"], abs=0.002)
    assert summary["rate_ratio"] == pytest.approx(guided["final_rate"] / best["measurement"]["rate"], abs=0.002)
    assert summary["baseline_ratio"] == pytest.approx(
        guided["baseline"]["rate"] / sweep[2]["measurement"]["rate"], abs=0.002
    )
    assert summary["meets_target"] == (
        min(summary["landing_ratio"], summary["rate_ratio"]) >= 0.9 and guided["wall_s"] < 180
    )
    table = (out / "guided_vs_sweep.md").read_text()
    assert "| 0 | ok |" in table and "| 2 | ok |" in table and "landing ratio" in table

    stored = dict(data, summary={}, guided={key: value for key, value in guided.items() if key != "final_rate"})
    (tmp_path / "stored.json").write_text(json.dumps(stored))
    again = subprocess.run(
        [sys.executable, str(BENCHMARK), "--rescore", str(tmp_path / "stored.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    rescored = json.loads((tmp_path / "stored.json").read_text())["summary"]
    assert (
        rescored["landing_ratio"] == summary["landing_ratio"]
        and rescored["baseline_ratio"] == summary["baseline_ratio"]
    )
    assert rescored["rate_ratio"] == pytest.approx(summary["rate_ratio"], abs=0.01), "from the baseline and speed-up"
    assert "num_workers   2: baseline: measured" in run.stdout, "lines print as they come"
