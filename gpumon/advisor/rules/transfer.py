"""transfer_bound: copies between host and device hold the GPU back (pageable memory, big batches, outputs copied
back)."""

from __future__ import annotations

from gpumon.advisor.categories import (
    TRANSFER_BOUND,
)
from gpumon.advisor.rules.common import (
    Candidate,
    gib,
    gpu_part,
    join_parts,
    pct,
    pct100,
    rate,
    rounded,
    source_factor,
    step_model_confidence,
)
from gpumon.advisor.signals import Signals
from gpumon.jobs.step_model import D2H_WAIT_RATE

PCIE_TRANSFER = 3e9
"""Bytes/s host<->device beyond which copies are a likely bottleneck of an under-used GPU (an H100 training job
with 4 pinned workers moved 1.1 GB/s at 43% GPU-Util without being copy-bound)."""
PCIE_TRANSFER_PAGEABLE = 1e9
"""The same when the hook shows pageable copies (pin_memory off), which run at a fraction of the link's speed."""
TRANSFER_UTIL = 70.0


def _budget_transfer(signals: Signals) -> Candidate | None:
    """transfer_bound from the hook's step budget: the host's time in host->device copies is their cost."""
    share = signals.budget.h2d_share or 0.0
    pageable = signals.budget.h2d_pageable
    copied = signals.budget.h2d_bytes_per_step or 0.0
    where = None
    if pageable is not None:
        where = (
            f"{pct(pageable)} from pageable memory (pin_memory off: synchronous copies)"
            if pageable >= 0.5
            else f"{pct(1.0 - pageable)} from pinned memory"
        )
    evidence = join_parts(
        f"host->device copies take {pct(share)} of each step",
        f"{gib(copied)} per step at {rate(signals.budget.h2d_rate)}",
        where,
        gpu_part(signals),
    )
    numbers = {
        "h2d_share": rounded(share),
        "h2d_bytes_per_step": rounded(copied, 0),
        "h2d_rate": rounded(signals.budget.h2d_rate, 0),
        "h2d_pageable": rounded(pageable),
        "pin_memory": signals.loader.pin_memory,
        "gpu_util": rounded(signals.gpu.gpu_util),
    }
    confidence = 0.85 if pageable is not None and pageable >= 0.5 else 0.7
    return Candidate(TRANSFER_BOUND, share, confidence, evidence, numbers)


def rule_transfer(signals: Signals) -> Candidate | None:
    """transfer_bound: from the step budget where the hook measured one, else from PCIe traffic of an idle GPU."""
    if not signals.has_gpu:
        return None
    if signals.budget.budget_steps and signals.budget.h2d_share is not None:
        return _budget_transfer(signals)
    if signals.gpu.gpu_util is None:
        return None
    traffic = (signals.gpu.pcie_rx or 0.0) + (signals.gpu.pcie_tx or 0.0)
    if signals.gpu.pcie_rx is None and signals.gpu.pcie_tx is None:
        return None
    threshold = PCIE_TRANSFER_PAGEABLE if signals.loader.pin_memory is False else PCIE_TRANSFER
    if traffic < threshold or signals.gpu.gpu_util >= TRANSFER_UTIL:
        return None
    # The idle time the data wait does not explain is what the copies can cost (both can share a step).
    severity = min((1.0 - signals.gpu.gpu_util / 100.0) * 0.9, max(0.0, 1.0 - (signals.step.data_share or 0.0)))
    direction = "host->device" if (signals.gpu.pcie_rx or 0.0) >= (signals.gpu.pcie_tx or 0.0) else "device->host"
    pinned = None
    if signals.loader.pin_memory is False:
        pinned = "pin_memory off (pageable copies)"
    evidence = join_parts(
        f"PCIe {direction} {rate(traffic)} while GPU-Util is {pct100(signals.gpu.gpu_util)}",
        pinned,
        f"SM activity {pct100(signals.gpu.sm_activity)}" if signals.gpu.sm_activity is not None else None,
    )
    numbers = {
        "pcie_rx": rounded(signals.gpu.pcie_rx, 0),
        "pcie_tx": rounded(signals.gpu.pcie_tx, 0),
        "gpu_util": rounded(signals.gpu.gpu_util),
        "pin_memory": signals.loader.pin_memory,
    }
    confidence = (0.8 if signals.loader.pin_memory is False else 0.65) * source_factor(signals)
    return Candidate(TRANSFER_BOUND, severity, confidence, evidence, numbers)


def transfer_evidence(signals: Signals, share: float) -> Candidate:
    """transfer_bound from the step model: copies both ways, each with its share, bytes and memory kind."""
    h2d = (
        _budget_transfer(signals)
        if signals.budget.budget_steps and signals.budget.h2d_share
        else rule_transfer(signals)
    )
    d2h = None
    if signals.budget.d2h_share:
        d2h = f"device->host copies (.cpu(), .to('cpu')) take {pct(signals.budget.d2h_share)} of each step" + (
            f", {gib(signals.budget.d2h_bytes_per_step)} a step" if signals.budget.d2h_bytes_per_step else ""
        )
    elif (signals.gpu.pcie_tx or 0.0) >= D2H_WAIT_RATE:
        d2h = (
            f"its waits for the GPU carry data back: PCIe device->host {rate(signals.gpu.pcie_tx)}"
            " (.cpu(), .to('cpu') or .numpy() of whole tensors, not scalar syncs)"
        )
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time on copies between host and device",
        h2d.evidence if h2d is not None and signals.budget.h2d_share else None,
        d2h,
        None if h2d is not None and signals.budget.h2d_share else gpu_part(signals),
    )
    numbers = dict(h2d.numbers) if h2d is not None else {}
    numbers.update(
        transfer_idle=rounded(share),
        d2h_share=rounded(signals.budget.d2h_share),
        d2h_bytes_per_step=rounded(signals.budget.d2h_bytes_per_step, 0),
    )
    confidence = h2d.confidence if h2d is not None else step_model_confidence(signals)
    return Candidate(TRANSFER_BOUND, share, confidence, evidence, numbers)
