"""benchmarks/scenario_truth.py's scoring on hand-made times and findings (the real figures come from GPU runs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks.scenario_truth import (
    BASE,
    SCENARIO_DIR,
    SCENARIOS,
    Cause,
    Scenario,
    diagnosed_share,
    markdown_table,
    result_line,
    score,
    truth_shares,
    variant_key,
)

TWO_CAUSES = Scenario(
    "two", "input_bound", (Cause("workers", "input_bound"), Cause("no_sync", "host_sync")), combine=True
)


def finding(category: str, severity: float, *secondary: tuple[str, float]) -> dict[str, Any]:
    return {
        "category": category,
        "severity": severity,
        "confidence": 0.8,
        "secondary": [{"category": c, "severity": s, "confidence": 0.6, "secondary": []} for c, s in secondary],
    }


def test_the_truth_is_one_minus_the_ratio_of_the_medians() -> None:
    shares = truth_shares({BASE: [10.0, 12.0, 11.0], "workers": [4.0, 5.0], "no_sync": [11.0]})
    assert shares["workers"] == pytest.approx(1 - 4.5 / 11.0)
    assert shares["no_sync"] == pytest.approx(0.0)


def test_a_fix_that_slows_the_job_has_a_negative_truth_and_a_missing_run_none() -> None:
    shares = truth_shares({BASE: [10.0], "pinned": [12.0], "bf16": []})
    assert shares["pinned"] == pytest.approx(-0.2)
    assert shares["bf16"] is None
    assert truth_shares({BASE: [], "pinned": [1.0]}) == {"pinned": None}


def test_the_diagnosed_share_is_the_severity_of_the_finding_of_that_category() -> None:
    found = finding("input_bound", 0.55, ("host_sync", 0.2))
    assert diagnosed_share(found, "input_bound") == pytest.approx(0.55)
    assert diagnosed_share(found, "host_sync") == pytest.approx(0.2)
    assert diagnosed_share(found, "cpu_bound") == 0.0
    assert diagnosed_share(None, "host_sync") == 0.0


def test_each_cause_is_held_to_its_truth_within_ten_points() -> None:
    truth = {"workers": 0.60, "no_sync": 0.15, "no_sync+workers": 0.70}
    row = score(TWO_CAUSES, truth, finding("input_bound", 0.52, ("host_sync", 0.30)), finding("host_sync", 0.4))
    hook, pyspy = row["hook"], row["pyspy"]
    assert hook["top_ok"] and hook["within"] == {"workers": True, "no_sync": False} and hook["all_within"] is False
    assert hook["shares"] == {"workers": 0.52, "no_sync": 0.3}
    assert not pyspy["top_ok"] and pyspy["within"] == {"workers": False, "no_sync": False}
    assert hook["false_alarm"] is None
    assert row["truth"] == {"workers": 0.6, "no_sync": 0.15, "no_sync+workers": 0.7}


def test_ten_points_exactly_is_within_and_a_negative_truth_counts_as_zero() -> None:
    one = Scenario("one", "transfer_bound", (Cause("pinned", "transfer_bound"),))
    assert score(one, {"pinned": 0.30}, finding("transfer_bound", 0.40), None)["hook"]["within"] == {"pinned": True}
    assert score(one, {"pinned": -0.05}, finding("healthy", 0.0), None)["hook"]["within"] == {"pinned": True}
    assert score(one, {"pinned": 0.30}, finding("transfer_bound", 0.41), None)["hook"]["within"] == {"pinned": False}


def test_an_unscored_cause_and_a_skipped_fix_are_not_held_to_a_truth() -> None:
    launch = SCENARIOS["launch_bound"]
    row = score(launch, {"bigger_batch": 0.9}, finding("launch_bound", 0.7), None)
    assert row["hook"]["within"] == {} and row["hook"]["all_within"] is None
    assert row["hook"]["shares"] == {"cuda_graph": 0.7, "bigger_batch": 0.7}
    assert row["pyspy"] is None


def test_a_healthy_scenario_named_anything_else_is_a_false_alarm() -> None:
    healthy = SCENARIOS["healthy_bf16"]
    row = score(healthy, {}, finding("healthy", 0.0), finding("low_precision", 0.35))
    assert row["hook"]["false_alarm"] is False and row["hook"]["top_ok"]
    assert row["pyspy"]["false_alarm"] is True and not row["pyspy"]["top_ok"]


def test_the_table_has_a_row_per_scenario_with_its_verdicts() -> None:
    rows = [
        score(TWO_CAUSES, {"workers": 0.6, "no_sync": 0.15}, finding("input_bound", 0.55), None),
        score(SCENARIOS["healthy_conv"], {}, finding("healthy", 0.0), finding("input_bound", 0.3)),
        {"scenario": "ddp_manual_allreduce", "expected": "comm_bound", "skipped": "needs 2 GPUs"},
    ]
    lines = markdown_table(rows).splitlines()
    assert len(lines) == 5 and all(line.count("|") == 9 for line in lines)
    assert "| two | workers 60%, no_sync 15% | input_bound | input_bound | - |" in lines[2]
    assert "workers: 55% / - vs 60%; no_sync: 0% / - vs 15%" in lines[2]
    assert lines[2].endswith("| no / - | - |")
    assert lines[3].endswith("| - | no / yes |")
    assert "skipped: needs 2 GPUs" in lines[4]


def test_variants_and_their_keys() -> None:
    assert [variant_key(v) for v in TWO_CAUSES.variants] == [BASE, "workers", "no_sync", "no_sync+workers"]
    assert [variant_key(v) for v in SCENARIOS["launch_bound"].variants] == [BASE, "cuda_graph", "bigger_batch"]


def test_the_result_line_is_the_last_json_line_of_the_scenario() -> None:
    out = 'noise\n{"scenario": "x", "steps": 1}\n{"scenario": "x", "steps": 2}\n{not json\n'
    assert result_line(out) == {"scenario": "x", "steps": 2}
    assert result_line("nothing\n") is None


def test_every_scenario_has_a_script_whose_fixes_match_the_runner() -> None:
    scripts = {path.stem for path in SCENARIO_DIR.glob("*.py")} - {"scenario_common"}
    assert scripts == set(SCENARIOS)
    readme = (SCENARIO_DIR / "README.md").read_text()
    for name, scenario in SCENARIOS.items():
        source = (SCENARIO_DIR / f"{name}.py").read_text()
        match = re.search(r"^FIXES[^=]*= \(([^)]*)\)", source, re.MULTILINE)
        assert match, name
        fixes = re.findall(r'"(\w+)"', match.group(1))
        assert fixes == [cause.fix for cause in scenario.causes], name
        assert f"`{name}`" in readme, name
        assert Path(SCENARIO_DIR / f"{name}.py").read_text().startswith(f'"""{name}: '), name


def test_a_cause_measured_under_the_advisors_bar_expects_healthy() -> None:
    from benchmarks.scenario_truth import MIN_SEVERITY, expected_top
    from gpumon.advisor.rules import MIN_SEVERITY as ADVISOR_BAR

    assert MIN_SEVERITY == ADVISOR_BAR
    ddp = SCENARIOS["ddp_manual_allreduce"]
    assert expected_top(ddp, {"no_comm": 0.13, "ddp": 0.045}) == "healthy"  # 2x H200, batch 8192
    assert expected_top(ddp, {"no_comm": 0.325, "ddp": 0.112}) == "comm_bound"  # batch 2048
    assert expected_top(ddp, {"no_comm": None}) == "comm_bound"  # not measured: the scenario's own
    row = score(ddp, {"no_comm": 0.13, "ddp": 0.045}, finding("healthy", 0.0), finding("comm_bound", 0.19))
    assert row["expected"] == "healthy"
    assert row["hook"]["top_ok"] and not row["pyspy"]["top_ok"]
    assert row["pyspy"]["false_alarm"]
