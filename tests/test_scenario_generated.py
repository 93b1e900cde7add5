"""The generated corpus on the CPU: plans drawn from seeds, each cause's ablation switch, and the runner's scoring."""

from __future__ import annotations

import gc
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks.scenario_corpus import main as corpus_main
from benchmarks.scenario_corpus import markdown, row_for, summarize
from benchmarks.scenarios.generated import job as generated_job
from benchmarks.scenarios.generated import parts
from benchmarks.scenarios.generated.plan import (
    EXCLUSIVE,
    FAMILIES,
    HELDOUT_SEEDS,
    LAUNCHES,
    LOADING,
    TUNE_SEEDS,
    Plan,
    either_of,
    expected_category,
    make_plan,
    measured_causes,
    measures_loading,
)

SEEDS = [*TUNE_SEEDS, *list(HELDOUT_SEEDS)[:200]]


def test_a_seed_always_gives_the_same_job_and_the_cpu_check_the_same_draws() -> None:
    for seed in SEEDS:
        plan, tiny = make_plan(seed), make_plan(seed, tiny=True)
        assert make_plan(seed) == plan
        assert (tiny.families, tiny.loop, tiny.data, tiny.optimizer) == (
            plan.families,
            plan.loop,
            plan.data,
            plan.optimizer,
        )


def test_the_plans_compose_causes_as_the_families_allow() -> None:
    seen: set[str] = set()
    counts = set()
    for seed in SEEDS:
        plan = make_plan(seed)
        families = set(plan.families)
        seen |= families
        counts.add(len(plan.causes))
        assert len(families) == len(plan.causes) <= 3
        assert not any(group <= families for group in EXCLUSIVE), (seed, families)
        for cause in plan.causes:
            assert cause.category == FAMILIES[cause.family].category
            assert 0.0 <= cause.magnitude <= 1.0
            if FAMILIES[cause.family].needs_cpu_data:
                assert plan.data != "gpu", seed
            if FAMILIES[cause.family].model:
                assert plan.model == FAMILIES[cause.family].model
        assert plan.ranks == (2 if "comm" in families else 1)
    assert seen == set(FAMILIES)
    assert counts == {0, 1, 2, 3}
    assert not set(TUNE_SEEDS) & set(HELDOUT_SEEDS)


def tiny_plan(family: str) -> Plan:
    """The first tuning seed with `family`, shrunk for the CPU, its loaders without worker processes."""
    plan = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if family in p.families)
    causes = tuple(
        replace(c, params={**c.params, "workers": 0}) if "workers" in c.params else c
        for c in plan.causes
        if c.family not in ("comm", "small_kernels") or c.family == family
    )
    data = "host_pool" if plan.data == "loader" else plan.data
    return replace(plan, causes=causes, ranks=1, data=data)


def built(family: str, monkeypatch: pytest.MonkeyPatch) -> generated_job.Job:
    plan = tiny_plan(family)
    monkeypatch.setattr(parts, "many_workers", lambda: 0)
    return generated_job.Job(plan, torch.device("cpu"), generated_job.Ranks("cpu"))


def steps(job: generated_job.Job, ablated: set[str], count: int = 2) -> None:
    job.set_variant(frozenset(ablated))
    source = job.source_for(job.ablated)
    for _ in range(count):
        job.train_step(next(source))


def test_gc_churn_keeps_its_records_with_the_collector_off(monkeypatch: pytest.MonkeyPatch) -> None:
    job = built("gc_churn", monkeypatch)
    cause = job.plan.cause("gc_churn")
    assert cause is not None
    try:
        steps(job, {"gc_churn"})
        assert not gc.isenabled()
        made = 2 * cause.params["records"]
        assert len(job.history) == (made if made <= cause.params["kept"] else made - made // 2)
        steps(job, set())
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()


def test_loader_switches_give_a_cached_batch_or_a_loader_of_more_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    job = built("loader_cpu", monkeypatch)
    cached = job.source_for(frozenset({"loader_cpu"}))
    assert next(cached) is next(cached)
    assert job.source_for(frozenset()) is job.batches
    few = built("few_workers", monkeypatch)
    assert few.source_for(frozenset({"few_workers"})) is not few.batches
    assert few.workers_of(frozenset({"few_workers"})) == 0  # many_workers() as patched


def test_train_cpu_moves_its_math_after_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    job = built("train_cpu", monkeypatch)
    cause = job.plan.cause("train_cpu")
    assert cause is not None
    job.plan = replace(job.plan, causes=(replace(cause, params={"style": "tensor_math", "rounds": 1}),))
    calls: list[str] = []
    real = parts.cpu_math
    monkeypatch.setattr(parts, "cpu_math", lambda x, rounds: calls.append("math") or real(x, rounds))
    python_calls: list[int] = []
    monkeypatch.setattr(parts, "weight_of", lambda label, terms: python_calls.append(label) or 1.0)
    steps(job, set(), 1)
    steps(job, {"train_cpu"}, 1)
    assert calls == ["math", "math"]  # the same math both ways (on the device: here the CPU too)
    job.plan = replace(job.plan, causes=(replace(cause, params={"style": "python_loop", "rounds": 3}),))
    steps(job, set(), 1)
    assert len(python_calls) == job.plan.batch
    steps(job, {"train_cpu"}, 1)
    assert len(python_calls) == job.plan.batch  # the weights as tensor math instead
    labels = torch.arange(20)
    assert torch.allclose(parts.weights_of(labels, 5), torch.tensor([real_weight(int(x), 5) for x in labels]))


def real_weight(label: int, terms: int) -> float:
    return 1.0 + sum((label + k) % 7 for k in range(1, terms + 1)) * 1e-3


def test_syncs_are_read_every_100_steps_once_ablated(monkeypatch: pytest.MonkeyPatch) -> None:
    job = built("syncs", monkeypatch)
    cause = job.plan.cause("syncs")
    assert cause is not None
    job.plan = replace(job.plan, causes=(replace(cause, params={"kinds": ["fstring", "item"], "tiny_ops": 2}),))
    steps(job, set(), 3)
    assert len(job.log) == 3
    steps(job, {"syncs"}, 3)
    assert len(job.log) == 3  # none of steps 3-5 is a multiple of 100


def test_the_other_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    d2h = built("d2h", monkeypatch)
    steps(d2h, {"d2h"}, 1)
    assert d2h.kept_on_host is None
    steps(d2h, set(), 1)
    assert d2h.kept_on_host is not None

    offload = built("cpu_optimizer", monkeypatch)
    assert offload.host_optimizer is not None
    host_steps: list[int] = []
    real_step = offload.host_optimizer.step
    monkeypatch.setattr(offload.host_optimizer, "step", lambda: host_steps.append(1) or real_step())
    steps(offload, set(), 2)
    steps(offload, {"cpu_optimizer"}, 2)
    assert len(host_steps) == 2

    churn = built("allocator_churn", monkeypatch)
    every_step = tuple(
        replace(c, params={"every": 1}) if c.family == "allocator_churn" else c for c in churn.plan.causes
    )
    churn.plan = replace(churn.plan, causes=every_step)
    emptied: list[int] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    steps(churn, set(), 2)
    steps(churn, {"allocator_churn"}, 2)
    assert len(emptied) == 2

    fp32 = built("fp32_math", monkeypatch)
    assert not fp32.bf16()
    fp32.set_variant(frozenset({"fp32_math"}))
    assert fp32.bf16()

    copy = built("pageable_copy", monkeypatch)
    steps(copy, set(), 1)
    steps(copy, {"pageable_copy"}, 1)
    assert set(copy.payloads) == {False, True}

    graphs = built("small_kernels", monkeypatch)
    assert "small_kernels" in graphs.unsupported and graphs.graph is None
    phases = generated_job.Phases(graphs, generated_job.parse(["--seed", "0"]))
    assert frozenset({"small_kernels"}) not in phases.variants()


def test_the_variants_are_the_base_each_cause_and_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if len(p.causes) == 3 and p.ranks == 1)
    plan = replace(plan, causes=tuple(c for c in plan.causes if c.family != "small_kernels"), data="host_pool")
    plan = replace(plan, causes=tuple(replace(c, params={**c.params, "workers": 0}) for c in plan.causes))
    job = generated_job.Job(plan, torch.device("cpu"), generated_job.Ranks("cpu"))
    keys = [
        generated_job.variant_key(v) for v in generated_job.Phases(job, generated_job.parse(["--seed", "0"])).variants()
    ]
    families = plan.families
    assert keys[0] == "base" and keys[1 : 1 + len(families)] == families
    assert (keys[-1] == "+".join(sorted(families))) == (len(families) > 1)
    gc.enable()


def test_the_runner_scores_a_job_against_the_cause_that_gives_back_most() -> None:
    plan = next(p for p in (make_plan(s) for s in TUNE_SEEDS) if len(p.causes) == 2)
    first, second = plan.causes
    truth: dict[str, float | None] = {first.family: 0.2, second.family: 0.35}
    assert expected_category(truth, plan, 0.15) == second.category
    assert expected_category({first.family: 0.1, second.family: None}, plan, 0.15) == "healthy"
    result: dict[str, Any] = {"truth": truth | {"+".join(sorted(plan.families)): 0.5}, "unsupported": {}}
    finding = {"category": "healthy", "severity": 0.0, "secondary": []}
    row = row_for(plan.seed, plan, {"result": result, "hook": {"finding": finding}, "pyspy": None})
    assert row["expected"] == second.category and not row["hook"]["top_ok"] and row["hook"]["healthy_missed"]
    healthy = next(p for p in (make_plan(s) for s in TUNE_SEEDS) if not p.causes)
    alarm = {"category": "launch_bound", "severity": 0.3, "secondary": []}
    row2 = row_for(healthy.seed, healthy, {"result": {"truth": {}}, "hook": {"finding": alarm}, "pyspy": None})
    assert row2["expected"] == "healthy" and row2["hook"]["false_alarm"]
    skipped = row_for(3, make_plan(3), {"result": None, "error": "killed after 240 s"})
    total = summarize([row, row2, skipped])
    assert total["hook"]["healthy_missed"] == 1 and total["hook"]["false_alarms"] == 1 and total["skipped"] == 1
    table = markdown([row, row2, skipped]).splitlines()
    assert len(table) == 5 and "wrong / -" in table[2] and "skipped: killed after 240 s" in table[4]


def test_py_spy_s_ratio_is_also_given_without_the_jobs_it_cannot_see() -> None:
    """The collector and the allocator run below the Python line py-spy samples: a job whose cause is one of them
    is left out of the second ratio, and said to be."""

    def row(expected: str, hook_ok: bool, pyspy_ok: bool) -> dict[str, Any]:
        side = {"within": {}, "false_alarm": None}
        return {
            "expected": expected,
            "either": [],
            "hook": side | {"top_ok": hook_ok},
            "pyspy": side | {"top_ok": pyspy_ok},
        }

    rows = [row("gc_bound", True, False), row("input_bound", True, True), row("launch_bound", True, False)]
    total = summarize(rows)
    assert total["pyspy_over_hook_top_right"] == round(1 / 3, 3)
    assert total["pyspy_blind_jobs"] == 1 and total["pyspy_over_hook_top_right_where_it_sees"] == 0.5


def test_the_base_loops_launches_are_a_cause_when_measured() -> None:
    healthy = next(p for p in (make_plan(s) for s in TUNE_SEEDS) if not p.causes)
    assert expected_category({}, healthy, 0.15) == "healthy"
    assert expected_category({LAUNCHES: 0.12}, healthy, 0.15) == "healthy"
    assert expected_category({LAUNCHES: 0.5}, healthy, 0.15) == "launch_bound"
    one = next(p for p in (make_plan(s) for s in TUNE_SEEDS) if len(p.causes) == 1 and p.ranks == 1)
    family = one.causes[0].family
    assert expected_category({family: 0.2, LAUNCHES: 0.4}, one, 0.15) == "launch_bound"
    assert expected_category({family: 0.45, LAUNCHES: 0.4}, one, 0.15) == one.causes[0].category
    finding = {"category": "launch_bound", "severity": 0.52, "secondary": []}
    result: dict[str, Any] = {"truth": {LAUNCHES: 0.5}, "unsupported": {}}
    row = row_for(healthy.seed, healthy, {"result": result, "hook": {"finding": finding}, "pyspy": None})
    assert row["expected"] == "launch_bound" and row["hook"]["top_ok"] and row["hook"]["within"] == {LAUNCHES: True}
    assert not row["hook"]["false_alarm"]


def test_causes_that_each_bound_the_job_are_each_right() -> None:
    plan = next(p for p in (make_plan(s) for s in TUNE_SEEDS) if len(p.causes) == 2 and p.ranks == 1)
    first, second = plan.causes
    together = "+".join(sorted(plan.families))
    truth: dict[str, float | None] = {first.family: 0.03, second.family: -0.02, together: 0.96}
    assert expected_category(truth, plan, 0.15) == "healthy"
    assert either_of(truth, plan, 0.15) == tuple(dict.fromkeys((first.category, second.category)))
    assert either_of(truth | {together: 0.1}, plan, 0.15) == ()
    assert either_of({first.family: 0.3, second.family: 0.0, together: 0.9}, plan, 0.15) == ()
    for category in (first.category, second.category):
        finding = {"category": category, "severity": 0.8, "secondary": []}
        ran = {"result": {"truth": truth, "unsupported": {}}, "hook": {"finding": finding}, "pyspy": None}
        row = row_for(plan.seed, plan, ran)
        assert row["hook"]["top_ok"] and not row["hook"]["healthy_missed"]
    healthy = {"category": "healthy", "severity": 0.0, "secondary": []}
    ran = {"result": {"truth": truth, "unsupported": {}}, "hook": {"finding": healthy}, "pyspy": None}
    row = row_for(plan.seed, plan, ran)
    assert not row["hook"]["top_ok"] and row["hook"]["healthy_missed"]
    assert " or " in markdown([row]).splitlines()[2]


def test_the_launches_truth_is_the_graphed_rest_against_the_baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if not p.causes)
    plan = replace(plan, data="gpu")
    job = generated_job.Job(plan, torch.device("cpu"), generated_job.Ranks("cpu"))
    assert job.unsupported[LAUNCHES] == "CUDA graphs need CUDA" and job.launch_graph is None
    job.launch_graph = object()  # type: ignore[assignment]
    phases = generated_job.Phases(job, generated_job.parse(["--seed", "0", "--rounds", "3"]))
    assert phases.variants() == [frozenset(), frozenset({LAUNCHES})]
    rates = {frozenset(): 100.0, frozenset({LAUNCHES}): 250.0}
    monkeypatch.setattr(phases, "window", lambda ablated: rates[ablated])
    truth = phases.truth()["truth"]
    assert truth[LAUNCHES] == pytest.approx(0.6)


def test_with_causes_the_launches_truth_is_measured_once_they_are_all_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if len(p.causes) == 2 and p.ranks == 1)
    plan = replace(plan, causes=tuple(replace(c, params={**c.params, "workers": 0}) for c in plan.causes))
    plan = replace(plan, data="host_pool")
    job = generated_job.Job(plan, torch.device("cpu"), generated_job.Ranks("cpu"))
    job.unsupported.clear()
    job.launch_graph = object()  # type: ignore[assignment]
    phases = generated_job.Phases(job, generated_job.parse(["--seed", "0", "--rounds", "1"]))
    both = frozenset(plan.families)
    assert phases.variants()[-2:] == [both, both | {LAUNCHES}]
    rates = dict.fromkeys(phases.variants(), 100.0) | {both: 200.0, both | {LAUNCHES}: 400.0}
    monkeypatch.setattr(phases, "window", lambda ablated: rates[ablated])
    truth = phases.truth()["truth"]
    assert truth[LAUNCHES] == pytest.approx(100.0 * (1 / 200.0 - 1 / 400.0))
    gc.enable()


def test_runs_on_two_gpus_merge_into_one_table_in_seed_order(tmp_path: Path) -> None:
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    parts = [results / "corpus-heldout-h200x2-2026-11-29-comm.json", results / "corpus-heldout-h200-2026-11-29-e.json"]
    out = tmp_path / "merged.json"
    assert corpus_main(["--merge", *map(str, parts), "--out", str(out)]) == 0
    merged = json.loads(out.read_text(encoding="utf-8"))
    rows = [row for part in parts for row in json.loads(part.read_text(encoding="utf-8"))["rows"]]
    assert [row["seed"] for row in merged["rows"]] == sorted(row["seed"] for row in rows)
    assert merged["summary"] == summarize(merged["rows"]) and len(merged["meta"]["merged"]) == 2
    assert out.with_suffix(".md").read_text(encoding="utf-8").count("| 10") == len(rows)
    assert corpus_main(["--merge", str(tmp_path / "missing.json"), "--out", str(out)]) == 2


def test_step_delivery_says_where_the_records_stop() -> None:
    from benchmarks.step_delivery_check import verdict

    hook = [(float(t), 10 * t) for t in range(8)]  # the hook closes ten steps a second
    every = {seq: 0.0 for seq in range(1, 71)}
    assert verdict(hook, every, [])["delivered"]
    late = {seq: 0.0 for seq in range(1, 31)}
    behind = verdict(hook, late, [])
    assert not behind["delivered"] and "20 of the 50 due did not arrive" in behind["where"]
    assert "sent none" in verdict(hook, {}, [])["where"]
    assert "closed no step" in verdict([(0.0, 5), (5.0, 5)], {}, [])["where"]
    assert "no state" in verdict([], {}, [])["where"]


def test_a_job_fed_by_its_base_loader_times_it_against_a_cached_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held-out 1056 and 1062 drew no cause, read their base DataLoader 28-58% of the step, and the truth called them
    healthy: the base loader's cost is measured now, a cached batch in its place, and named input_bound."""
    plan = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if not p.causes)
    plan = replace(plan, data="loader")
    assert measures_loading(plan) and not measures_loading(replace(plan, data="gpu"))
    job = generated_job.Job(plan, torch.device("cpu"), generated_job.Ranks("cpu"))
    assert job.workers_of(frozenset()) == 2 and job.workers_of(frozenset({LOADING})) == 0
    cached = job.source_for(frozenset({LOADING}))
    first, second = next(cached), next(cached)
    assert first[0] is second[0], "one batch, over and over"
    phases = generated_job.Phases(job, generated_job.parse(["--seed", "0", "--rounds", "1"]))
    assert phases.variants() == [frozenset(), frozenset({LOADING})]
    rates = {frozenset(): 100.0, frozenset({LOADING}): 160.0}
    monkeypatch.setattr(phases, "window", lambda ablated: rates[ablated])
    truth = phases.truth()["truth"]
    assert truth[LOADING] == pytest.approx(1 - 100.0 / 160.0)
    assert expected_category(truth, plan, 0.15) == "input_bound"
    assert (LOADING, "input_bound") in measured_causes(truth, plan)
    with_cause = next(p for p in (make_plan(s, tiny=True) for s in TUNE_SEEDS) if "loader_cpu" in p.families)
    assert not measures_loading(replace(with_cause, data="loader")), "a loader cause's own ablation measures it"
