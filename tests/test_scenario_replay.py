"""benchmarks/scenario_replay.py on a real held-out run's recorded signals (2 x H200, 2026-11-29, tree 1f2fdcd)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.scenario_replay import main, replay_row
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import Signals

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "corpus-heldout-h200x2-2026-11-29-1f2fdcd.json"


def test_a_replayed_row_is_scored_on_today_s_finding_against_its_recorded_truth() -> None:
    rows = json.loads(RUN.read_text())["rows"]
    row = next(r for r in rows if r["seed"] == 1110)  # device->host copies, truth 86%
    replayed = replay_row(row)
    today = diagnose(Signals.from_dict(row["hook_diagnosis"]["signals"]))
    assert replayed["hook"]["category"] == today.category
    assert replayed["truth"] == row["truth"] and replayed["expected"] == row["expected"]
    assert replayed["hook"]["top_ok"] == (today.category == row["expected"])
    # py-spy's verdict as run was host_sync; its waits carried 1.2 GB/s back, which today's step model reads.
    assert row["pyspy"]["category"] == "host_sync" and replayed["pyspy"]["category"] == "transfer_bound"


def test_the_summary_says_as_run_and_as_replayed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(RUN)]) == 0
    out = capsys.readouterr().out
    assert "as run:" in out and "replayed on this checkout:" in out
    assert "hooked: top category right 46 of 48" in out.split("replayed on this checkout:")[0]


def test_a_file_that_is_not_a_result_gets_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"rows": 3}')
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a scenario_corpus result" in err
