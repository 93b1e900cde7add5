"""On two NVLink-connected GPUs (issue 38 item 6): the NVLink rates the dashboard shows for the two ranks of one NCCL
all-reduce agree with each other and with the bytes the ranks count, are current to the sampling interval (no reading
repeated from the tick before, trailing the traffic by less than one interval) and read ~0 from the first tick that
begins one interval after the traffic ends; from GPM (H100, H200; its figures trail by about 0.1 s) and from the NVLink
counters (the path of GPUs without GPM's NVLink rates). benchmarks/nvlink_allreduce_check.py does the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.nvlink_allreduce_check import TOLERANCE
from tests.job_process import nvml_uuids

REPOSITORY = Path(__file__).resolve().parents[2]
SCRIPT = REPOSITORY / "benchmarks" / "nvlink_allreduce_check.py"


@pytest.mark.parametrize(("interval", "source"), [(0.25, "gpm"), (0.25, "counters")])
def test_both_ranks_of_one_all_reduce_read_alike_the_truth_and_current(
    tmp_path: Path, interval: float, source: str
) -> None:
    if len(nvml_uuids()) < 2:
        pytest.skip("NVLink traffic needs two GPUs (nvidia-h200-x2)")
    command = [sys.executable, str(SCRIPT), "--interval", f"{interval:g}", "--seconds", "8", "--idle", "3"]
    command += ["--out", str(tmp_path), *(["--counters"] if source == "counters" else [])]
    path = os.pathsep.join(filter(None, (str(REPOSITORY), os.environ.get("PYTHONPATH"))))
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=320, cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=path)
    )
    print(run.stdout[-8000:], run.stderr[-2000:])
    if run.returncode == 2 and "no NVLink readings" in run.stdout:
        pytest.skip("these GPUs report no NVLink")
    assert run.returncode in (0, 1), f"the run could not measure: {run.stdout[-600:]} {run.stderr[-1500:]}"

    document = json.loads((tmp_path / f"nvlink_allreduce-{interval:g}s-{source}.json").read_text(encoding="utf-8"))
    summary, checks = document["summary"], document["checks"]
    assert summary["load_ticks"] >= 20 and checks["readings_every_load_tick"], summary
    ranks = summary["rank0_to_rank1"]
    assert abs(ranks["bytes"] - 1.0) <= TOLERANCE, f"the two ranks' GPUs read {ranks['bytes']:.2f} times apart"
    assert checks["ranks_agree"], ranks
    for gpu, entry in summary["gpus"].items():
        for direction in ("rx", "tx"):
            ratio = entry[f"{direction}_to_truth"]
            assert abs(ratio - 1.0) <= TOLERANCE, f"GPU {gpu} {direction}: {ratio:.2f} of the bytes its rank moved"
    assert checks["truth_agrees"], summary["gpus"]
    assert summary["stale_repeats"] == 0 and summary["longest_same_reading_ticks"] == 1, "a reading stood 2+ ticks"
    trails = {gpu: entry["trail_s"] for gpu, entry in summary["gpus"].items()}
    assert checks["trails_under_one_interval"], f"seconds the readings trail the traffic: {trails}"
    assert checks["idle_reads_zero"], summary["idle"]
    assert all(checks.values()), checks
