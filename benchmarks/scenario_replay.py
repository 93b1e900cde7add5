"""Replay a generated-corpus run's recorded signals on today's advisor, scored as the run was: a replay, not a score.

Usage (repo root; no GPU needed):

    python benchmarks/scenario_replay.py benchmarks/results/corpus-heldout-h200x2-2026-11-29-1f2fdcd.json

Each row of a `scenario_corpus.py` result holds every diagnosis's signals. This diagnoses them again with the advisor
of this checkout (a py-spy diagnosis's step model made again from its fractions, as `gpumon diagnose --pyspy` makes
it), scores each against the row's recorded truth as `scenario_corpus.py` does, and prints the run's summary as run
and as replayed, with each row whose verdict or shares changed. A replay shows what a change does to jobs already
looked at; only a run on seeds never run before is a score.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.scenario_corpus import scenario_of, summarize, summary_text
from benchmarks.scenario_truth import TOLERANCE, score
from benchmarks.scenarios.generated.plan import make_plan
from gpumon.advisor.rules import diagnose
from gpumon.advisor.signals import Signals, estimate_model_figures

SOURCES = (("hook", "hook_diagnosis"), ("pyspy", "pyspy_diagnosis"))


def rediagnose(recorded: Mapping[str, Any] | None, source: str) -> dict[str, Any] | None:
    """Today's finding on a diagnosis's recorded signals (None where the run had none)."""
    if not recorded or "signals" not in recorded:
        return None
    signals = Signals.from_dict(recorded["signals"])
    if source == "pyspy":
        signals = replace(signals, step_model=estimate_model_figures(signals.gpu, signals.pyspy, signals.host.main_cpu))
    return diagnose(signals).to_dict()


def replay_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row scored again on today's findings (a skipped row stays as it was)."""
    if row.get("skipped"):
        return dict(row)
    plan = make_plan(int(row["seed"]))
    scenario, truth = scenario_of(plan, {"truth": row["truth"], "unsupported": row.get("unsupported")})
    findings = {source: rediagnose(row.get(key), source) for source, key in SOURCES}
    scored = score(scenario, truth, findings["hook"], findings["pyspy"], TOLERANCE)
    return {**row, **scored, "seed": row["seed"]}


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What differs between a row as run and as replayed, one phrase per diagnosis."""
    said = []
    for source, _key in SOURCES:
        old, new = before.get(source) or {}, after.get(source) or {}
        if old.get("category") != new.get("category") or old.get("shares") != new.get("shares"):
            said.append(
                f"{source}: {old.get('category')} {old.get('shares')} -> {new.get('category')} {new.get('shares')}"
            )
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="scenario_corpus.py result JSON files")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for path in args.results:
        try:
            rows.extend(json.loads(path.read_text())["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"scenario_replay: {path}: not a scenario_corpus result ({type(exc).__name__})", file=sys.stderr)
            return 2
    replayed = [replay_row(row) for row in rows]
    for before, after in zip(rows, replayed, strict=True):
        for change in changes(before, after):
            print(f"seed {before.get('seed')}: {change}")
    print("as run:")
    print(summary_text(summarize(rows)))
    print("replayed on this checkout:")
    print(summary_text(summarize(replayed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
