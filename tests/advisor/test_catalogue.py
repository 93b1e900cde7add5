"""The catalogue: which experiments each finding gets, their values, labels, and the code change."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpumon import protocol
from gpumon.advisor.catalogue import KNOBS, Experiment, code_change, experiments_for, split_knobs, worker_target
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import Signals


def test_an_input_bound_job_first_gets_more_workers(demo_signals: Signals) -> None:
    finding = diagnose(demo_signals)
    experiments = experiments_for(finding, demo_signals)
    assert experiments[0].knobs == {"num_workers": 2}, "2 cores recorded: the floor of two workers"
    assert experiments[0].label == "num_workers 0 -> 2" and experiments[0].live
    assert all(e.reason == "input_bound" for e in experiments)


def test_worker_target_leaves_two_cores_and_doubles_existing_workers(demo_signals: Signals) -> None:
    on_16_cores = replace(demo_signals, host=replace(demo_signals.host, cores=16))

    def with_workers(count: int) -> Signals:
        return replace(on_16_cores, loader=replace(demo_signals.loader, num_workers=count))

    assert worker_target(with_workers(0), None) == 14
    assert worker_target(with_workers(4), None) == 8
    assert worker_target(with_workers(14), None) is None


def test_a_busy_gpu_gets_the_precision_knobs_flagged() -> None:
    signals = Signals.of(
        source="hook",
        device="cuda",
        gpu_util=99,
        sm_activity=80,
        tensor_activity=0.5,
        autocast=False,
        tf32_matmul=False,
        batch_size=64,
        cudnn_benchmark=False,
    )
    finding = Finding("low_precision", "", 0.85)
    names = [next(iter(e.knobs)) for e in experiments_for(finding, signals)]
    assert names[:4] == ["amp_bf16", "tf32", "channels_last", "cudnn_benchmark"]
    amp = experiments_for(finding, signals)[0]
    assert not amp.live and not amp.hook_only and amp.flags == ["changes numerics: check the loss curve"]


def test_kept_knobs_are_not_proposed_again_and_labels_start_from_them(demo_signals: Signals) -> None:
    finding = Finding("input_bound", "", 0.9)
    again = experiments_for(finding, demo_signals, current={"num_workers": 2})
    assert all("num_workers" not in e.knobs for e in again)


def test_findings_no_knob_fixes_get_no_experiment() -> None:
    signals = Signals.of(source="hook", device="cuda", gpu_util=60)
    assert experiments_for(Finding("memory_imbalance", "", 0.8), signals) == []


def test_code_change_merges_dataloader_arguments_and_lists_the_rest() -> None:
    lines = code_change(
        {"num_workers": 12, "pin_memory": True, "amp_bf16": True, "batch_size": 256, "cudnn_benchmark": True}
    )
    assert lines[0] == "DataLoader(..., batch_size=256, num_workers=12, pin_memory=True)"
    assert lines[1] == "x = x.to(device, non_blocking=True)"
    assert any(line.startswith("with torch.autocast") for line in lines)
    assert "torch.backends.cudnn.benchmark = True" in lines


def test_split_knobs_checks_the_hooks_and_leaves_the_scripts() -> None:
    hook, script = split_knobs({"num_workers": 4, "amp_bf16": True, "tf32": True})
    assert hook == {"num_workers": 4, "tf32": True} and script == {"amp_bf16": True}
    with pytest.raises(protocol.ProtocolError):
        split_knobs({"num_workers": -1})


def test_every_protocol_knob_is_in_the_catalogue_with_the_same_liveness() -> None:
    for name, spec in protocol.KNOBS.items():
        if name == "float32_matmul_precision":
            continue  # covered by tf32
        assert KNOBS[name].hook and KNOBS[name].live == spec["live"]
    assert Experiment({"num_workers": 2, "pin_memory": True}).live
    assert not Experiment({"num_workers": 2, "tf32": True}).live


def test_a_cpu_bound_job_tries_moving_its_transforms_into_the_workers() -> None:
    # The recorded H200 case: preprocessing in the training thread, no DataLoader workers.
    import json
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios" / "h200-2026-11-27.json"
    case = next(
        c
        for c in json.loads(fixture.read_text())["cases"]
        if c["scenario"] == "two_cause_cpu_sync" and c["source"] == "hook"
    )
    recorded = Signals.from_dict(case["signals"])
    signals = replace(
        recorded,
        loader=replace(recorded.loader, num_workers=0),
        host=replace(recorded.host, cores=16, idle_cores=14),
    )
    finding = diagnose(signals)
    assert finding.category == "cpu_bound"
    names = [next(iter(e.knobs)) for e in experiments_for(finding, signals, cores=16)]
    assert names[0] == "augment_in_workers" and "num_workers" in names
