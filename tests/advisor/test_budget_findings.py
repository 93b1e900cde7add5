"""Four failures seen on real jobs as recorded-signal tests: the real H100 training recording's snapshots with the
GPU figures each failing job showed laid over them, and hook messages (or a py-spy estimate) shaped like that job's
(the step budget on one step in 16, as the hook sends it). Each finding's severity is its share of the step; the
shares add up to at most 100%."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from advisor_support import REPO

from gpumon.advisor.categories import HOST_SYNC, INPUT_BOUND, LOW_PRECISION, TRANSFER_BOUND
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import Signals, build_signals
from gpumon.jobs.jobstate import replay_messages
from gpumon.jobs.pyspy.categories import CATEGORIES, SYNC_NATIVE, SYNC_SOURCE
from gpumon.jobs.pyspy.estimate import EstimateView
from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

RECORDING = REPO / "assets" / "recordings" / "h100-training.jsonl"
PID = 4242
BATCH_BYTES = 256 * 3 * 224 * 224 * 4  # 154 MB of fp32 images per batch


def gpu_run(util: float, sm: float, tensor: float = 0.0, pcie_rx: float = 0.0) -> list[Snapshot]:
    """The recording's snapshots with the job's GPU figures (GPU 0 is the one the job holds a context on)."""
    snapshots = read_recording(RECORDING)
    out = []
    for snapshot in snapshots:
        gpus = tuple(
            replace(gpu, utilization_gpu=util, sm_activity=sm, tensor_activity=tensor, pcie_rx=pcie_rx, pcie_tx=0.0)
            for gpu in snapshot.gpus
        )
        processes = tuple(replace(process, pid=PID) for process in snapshot.processes[:1])
        out.append(replace(snapshot, gpus=gpus, processes=processes))
    return out


def hook_messages(
    snapshots: list[Snapshot],
    *,
    wall_ms: float,
    data_ms: float,
    gpu_ms: float,
    budget: Mapping[str, Any] | None,
    loader: Mapping[str, Any],
    precision: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """hello, state and steps over the recording's span, as the hook sends them."""
    start, end = snapshots[0].timestamp, snapshots[-1].timestamp
    records = []
    t, seq = start, 0
    while t + wall_ms / 1e3 <= end:
        seq += 1
        t += wall_ms / 1e3
        record: dict[str, Any] = {
            "seq": seq,
            "t": round(t, 4),
            "wall_ms": wall_ms,
            "data_ms": data_ms,
            "gpu_ms": gpu_ms if seq % 8 == 0 else None,
            "samples": 256,
            "source": "optimizer",
        }
        if budget is not None and seq % 16 == 0:
            record["budget"] = {**budget, "gpu_ms": record["gpu_ms"]}
        records.append(record)
    cuda = {"initialized": True, "device": 0, "devices": [{"index": 0, "uuid": snapshots[0].gpus[0].uuid}]}
    state = {
        "type": "state",
        "t": end,
        "last_seq": seq,
        "step_source": "optimizer",
        "cuda": cuda,
        "dataloaders": [{"id": 1, "dataset": "TensorDataset", "batch_size": 256, **loader}],
        "precision": precision
        or {
            "autocast": None,
            "tf32_matmul": False,
            "tf32_cudnn": True,
            "float32_matmul_precision": "highest",
            "cudnn_benchmark": False,
        },
        "memory": {
            "device": 0,
            "allocated": 1 << 30,
            "reserved": 2 << 30,
            "max_allocated": 1 << 30,
            "alloc_retries": 0,
            "ooms": 0,
        },
    }
    hello = {"type": "hello", "protocol": 1, "pid": PID, "argv": ["train.py"], "started": start - 5, "cuda": cuda}
    steps = [
        {
            "type": "steps",
            "t": records[i + 255]["t"] if i + 255 < len(records) else end,
            "records": records[i : i + 256],
        }
        for i in range(0, len(records), 256)
    ]
    return [hello, state, *steps]


def recorded(signals: Signals) -> Signals:
    """Signals written as a recorded case and read back."""
    return Signals.from_dict(json.loads(json.dumps(signals.to_dict())))


def signals_of(snapshots: list[Snapshot], messages: list[dict[str, Any]]) -> Signals:
    view = replay_messages(messages, pid=PID).view()
    return recorded(build_signals(snapshots, view, pid=PID))


def shares(finding: Finding) -> dict[str, float]:
    return {f.category: f.severity for f in (finding, *finding.secondary)}


# Failure 1: pageable 154 MB batches, pin_memory=False, no workers: half the step collating, half copying.
PAGEABLE_BUDGET = {
    "data_worker_ms": 4.0,
    "data_collate_ms": 41.0,
    "h2d_ms": 47.0,
    "h2d_bytes": BATCH_BYTES,
    "h2d_pageable_bytes": BATCH_BYTES,
    "h2d_copies": 2,
    "sync_wait_ms": 1.0,
    "syncs": 1,
    "rest_ms": 7.0,
}
PAGEABLE_LOADER = {"num_workers": 0, "pin_memory": False, "prefetch_factor": None, "persistent_workers": False}


def test_failure_1_pageable_copies_and_collate_share_the_step() -> None:
    snapshots = gpu_run(util=7.0, sm=0.6, pcie_rx=3.3e9)
    signals = signals_of(
        snapshots,
        hook_messages(
            snapshots, wall_ms=100.0, data_ms=45.0, gpu_ms=6.0, budget=PAGEABLE_BUDGET, loader=PAGEABLE_LOADER
        ),
    )
    assert signals.budget.budget_steps and signals.budget.h2d_share == pytest.approx(0.47, abs=0.01)
    finding = diagnose(signals)
    found = shares(finding)
    assert finding.category == INPUT_BOUND
    assert TRANSFER_BOUND in found, finding.to_dict()
    assert found[TRANSFER_BOUND] == pytest.approx(0.47, abs=0.01)
    assert found[INPUT_BOUND] == pytest.approx(0.45, abs=0.01)
    assert sum(found.values()) <= 1.0 + 1e-9
    transfer = next(f for f in finding.secondary if f.category == TRANSFER_BOUND)
    assert "host->device copies take 47% of each step" in transfer.evidence
    assert "pageable" in transfer.evidence and "GB/s" in transfer.evidence
    assert "collate_fn takes 41%" in finding.evidence


def test_failure_1_without_a_budget_the_transfer_is_still_named() -> None:
    """An older hook (no budget): the data wait of 45% no longer hides the PCIe copies; their share is capped by
    what the data wait leaves."""
    snapshots = gpu_run(util=7.0, sm=0.6, pcie_rx=3.3e9)
    signals = signals_of(
        snapshots,
        hook_messages(snapshots, wall_ms=100.0, data_ms=55.0, gpu_ms=40.0, budget=None, loader=PAGEABLE_LOADER),
    )
    assert signals.budget.budget_steps is None and signals.step.data_share == pytest.approx(0.55, abs=0.01)
    found = shares(diagnose(signals))
    assert TRANSFER_BOUND in found and found[TRANSFER_BOUND] == pytest.approx(0.45, abs=0.01)
    assert sum(found.values()) <= 1.0 + 1e-9


def test_failure_3_sync_sites_name_the_jobs_line() -> None:
    snapshots = gpu_run(util=31.0, sm=20.0)
    budget = {
        "data_worker_ms": 1.0,
        "data_collate_ms": 0.0,
        "h2d_ms": 0.5,
        "h2d_bytes": 1 << 20,
        "h2d_pageable_bytes": 0,
        "h2d_copies": 1,
        "sync_wait_ms": 9.0,
        "syncs": 27,
        "rest_ms": 19.5,
    }
    messages = hook_messages(
        snapshots, wall_ms=30.0, data_ms=1.0, gpu_ms=9.3, budget=budget, loader={"num_workers": 4, "pin_memory": True}
    )
    diagnosis = {
        "type": "diagnosis",
        "available": True,
        "steps": 20,
        "syncs_total": 540,
        "syncs_per_step": [27] * 20,
        "sites": [{"file": "/home/u/train.py", "line": 57, "count": 540}],
    }
    view = replay_messages([*messages, diagnosis], pid=PID).view()
    finding = diagnose(recorded(build_signals(snapshots, view, pid=PID)))
    assert finding.category == HOST_SYNC
    assert "27 host-device syncs per step (most at /home/u/train.py:57 (540))" in finding.evidence
    assert "the host waits in them 30% of each step" in finding.evidence
    assert "torch/" not in finding.evidence


def estimate(sync_share: float, evidence: Mapping[str, int]) -> EstimateView:
    total = 1000
    sync = round(total * sync_share)
    counts = {category: 0 for category in CATEGORIES}
    counts.update(cuda_sync=sync, forward=(total - sync) // 2, backward=total - sync - (total - sync) // 2)
    return EstimateView(
        pid=PID,
        command="python train.py",
        rounds=15,
        counts=counts,
        recent=counts,
        hot_frames={"cuda_sync": "main (train.py:57)"},
        sync_evidence=dict(evidence),
        recent_sync_evidence=dict(evidence),
    )


def test_failure_2_py_spy_sees_the_item_syncs_with_the_confidence_each_way_deserves() -> None:
    """No hook: a loop with .item() per parameter. Read from the source line only, host_sync comes with a low
    confidence; seen in cudaStreamSynchronize frames (py-spy --native), with more."""
    snapshots = gpu_run(util=31.0, sm=20.0)
    from_source = diagnose(recorded(build_signals(snapshots, estimate(0.4, {SYNC_SOURCE: 400}), pid=PID)))
    native = diagnose(recorded(build_signals(snapshots, estimate(0.4, {SYNC_NATIVE: 400}), pid=PID)))
    assert from_source.category == native.category == HOST_SYNC
    assert "source line" in from_source.evidence and "--native" in native.evidence
    assert 0.1 < from_source.confidence < native.confidence < 0.6
    assert from_source.severity == native.severity == pytest.approx(0.4)


def test_failure_4_fp32_resnet_evidence_is_true_to_the_letter() -> None:
    """cuDNN's TF32 is on by default (convolutions), matmul TF32 off: the evidence must not say "TF32 off"."""
    snapshots = gpu_run(util=87.0, sm=70.0, tensor=9.8)
    signals = signals_of(
        snapshots,
        hook_messages(
            snapshots,
            wall_ms=50.0,
            data_ms=1.0,
            gpu_ms=45.0,
            budget=None,
            loader={"num_workers": 8, "pin_memory": True},
        ),
    )
    precision = signals.precision
    assert precision.tf32_cudnn is True and precision.tf32_matmul is False and precision.autocast is False
    finding = diagnose(signals)
    assert finding.category == LOW_PRECISION
    assert "TF32 off)" not in finding.evidence
    assert "no autocast, TF32 off for matmuls, on for cuDNN convolutions" in finding.evidence
    every_flag_off = signals_of(
        snapshots,
        hook_messages(
            snapshots,
            wall_ms=50.0,
            data_ms=1.0,
            gpu_ms=45.0,
            budget=None,
            loader={"num_workers": 8},
            precision={"tf32_matmul": False, "tf32_cudnn": False, "float32_matmul_precision": "highest"},
        ),
    )
    assert "(no autocast, TF32 off)" in diagnose(every_flag_off).evidence


def test_shares_of_every_finding_add_up_to_at_most_the_step() -> None:
    """Many causes at once (data wait, copies, syncs, fp32 on a GPU that is also busy): nothing is dropped for
    another, and the shares stay within 100%."""
    snapshots = gpu_run(util=60.0, sm=30.0, pcie_rx=4e9)
    budget = {
        **PAGEABLE_BUDGET,
        "data_worker_ms": 30.0,
        "data_collate_ms": 0.0,
        "h2d_ms": 40.0,
        "sync_wait_ms": 5.0,
        "syncs": 6,
        "rest_ms": 25.0,
    }
    signals = signals_of(
        snapshots,
        hook_messages(snapshots, wall_ms=100.0, data_ms=30.0, gpu_ms=60.0, budget=budget, loader=PAGEABLE_LOADER),
    )
    found = shares(diagnose(signals))
    assert {INPUT_BOUND, TRANSFER_BOUND} <= set(found)
    assert sum(found.values()) <= 1.0 + 1e-9


def test_the_share_of_steps_that_waited_for_their_batch_tells_a_steady_wait_from_a_bursty_one() -> None:
    """The same mean data wait (20% of the step) from every step waiting a fifth of it, or from one step in four
    waiting 80%: a loader that sets the pace makes every step wait, one that falls behind now and then a few."""
    snapshots = gpu_run(util=70.0, sm=50.0)
    loader = {"num_workers": 4, "pin_memory": True}
    steady = hook_messages(snapshots, wall_ms=100.0, data_ms=20.0, gpu_ms=60.0, budget=None, loader=loader)
    bursty = hook_messages(snapshots, wall_ms=100.0, data_ms=0.0, gpu_ms=60.0, budget=None, loader=loader)
    for message in bursty:
        for record in message.get("records", []):
            record["data_ms"] = 80.0 if record["seq"] % 4 == 0 else 0.0
    steady_signals, bursty_signals = signals_of(snapshots, steady), signals_of(snapshots, bursty)
    assert steady_signals.step.data_share == pytest.approx(0.2, abs=0.01)
    assert bursty_signals.step.data_share == pytest.approx(0.2, abs=0.01)
    assert steady_signals.step.data_wait_steps == pytest.approx(1.0)
    assert bursty_signals.step.data_wait_steps == pytest.approx(0.25, abs=0.01)
