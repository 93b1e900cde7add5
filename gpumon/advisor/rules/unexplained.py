"""unexplained_idle: GPU idle time that no owner explains, said as such with the lines and what would tell more."""

from __future__ import annotations

from gpumon.advisor.categories import UNEXPLAINED_IDLE
from gpumon.advisor.rules.common import Candidate, gpu_part, join_parts, pct, rounded, source_factor
from gpumon.advisor.signals import SOURCE_PYSPY, Signals

UNEXPLAINED_CONFIDENCE = 0.5
"""The idle is measured; who owns it is not known."""


def unexplained_evidence(signals: Signals, share: float, owners: str = "") -> Candidate:
    """The idle share no owner takes, its top lines, and how to learn more."""
    lines = ", ".join(
        f"{where} ({pct(line)})"
        for where, line in zip(signals.step_model.idle_lines, signals.step_model.idle_line_shares, strict=False)
    )
    tell_more = (
        "`gpumon diagnose --native --pid PID` sees C/C++ frames; `gpumon run` measures each step"
        if signals.source == SOURCE_PYSPY
        else "`gpumon diagnose --native --pid PID` sees C/C++ frames; `--profile 10` captures the kernels and gaps"
    )
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time and no single cause owns it",
        owners or None,
        f"idle at {lines}" if lines else None,
        gpu_part(signals),
        tell_more,
    )
    numbers = {"unexplained_idle": rounded(share), "lines": list(signals.step_model.idle_lines[:3])}
    return Candidate(UNEXPLAINED_IDLE, share, UNEXPLAINED_CONFIDENCE * source_factor(signals), evidence, numbers)
