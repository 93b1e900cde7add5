"""healthy: said only when the GPU is busy, or nothing at all idles it; what to say when there is not enough data."""

from __future__ import annotations

from gpumon.advisor.categories import (
    HEALTHY,
)
from gpumon.advisor.rules.common import (
    Finding,
    gpu_busy,
    gpu_part,
    join_parts,
    pct,
    pct100,
    rounded,
    source_factor,
)
from gpumon.advisor.rules.throttled import power_limit_lines
from gpumon.advisor.signals import SOURCE_HOOK, SOURCE_PYSPY, Signals

HEALTHY_ADVICE_UNDER_USED = (
    "No bottleneck stood out in this window though the GPU is not fully busy: watch a longer "
    "window, or run the job with the hook (gpumon run / attach) for step timings."
)
PYSPY_BLIND = (
    "py-spy sees only Python frames: a sync inside C++ (.item(), `if loss < best:`) or a kernel launch reads as "
    "the line that calls it; `gpumon diagnose --native --pid PID` unwinds C/C++, `gpumon run` measures the step"
)
HEALTHY_ADVICE_CPU = (
    "The job computes on the CPU, so nothing here holds a GPU back; to train faster, move the model "
    "and its batches to a GPU (.to('cuda'))."
)
HEALTHY_ADVICE_NO_GPU_FIGURES = "Nothing big to fix in the steps the hook measured (no GPU figures to judge by)."
HEALTHY_ADVICE_NO_DATA = "Not enough data yet: let the job run some steps, then look again."


def healthy_finding(signals: Signals) -> Finding:
    numbers = {
        "gpu_util": rounded(signals.gpu.gpu_util),
        "sm_activity": rounded(signals.gpu.sm_activity),
        "tensor_activity": rounded(signals.gpu.tensor_activity),
        "data_share": rounded(signals.step.data_share),
        "samples_per_s": rounded(signals.step.samples_per_s),
    }
    parts = [gpu_part(signals)]
    if signals.gpu.tensor_activity is not None:
        parts.append(f"tensor activity {pct100(signals.gpu.tensor_activity)}")
    if signals.step.data_share is not None:
        parts.append(f"waits for data {pct(signals.step.data_share)} of each step")
    parts.extend(power_limit_lines(signals))
    factor = source_factor(signals)
    if signals.has_gpu and signals.gpu.gpu_util is not None:
        advice = ""
        if gpu_busy(signals):
            confidence = (0.85 if signals.has_gpm else 0.65) * factor
            evidence = join_parts("the GPU is busy", *parts)
        else:
            confidence = 0.2 * factor
            evidence = join_parts(
                "no bottleneck stands out",
                *parts,
                PYSPY_BLIND
                if signals.source == SOURCE_PYSPY and not signals.pyspy.native
                else "watch longer, or attach the hook for step data"
                if signals.source != SOURCE_HOOK
                else None,
            )
            advice = HEALTHY_ADVICE_UNDER_USED
    elif signals.device == "cpu":
        confidence = 0.6 * factor
        evidence = join_parts("computes on the CPU (no GPU in use) and is not waiting for data", *parts)
        advice = HEALTHY_ADVICE_CPU
    elif signals.source == SOURCE_HOOK and signals.step.steps:
        confidence = 0.3
        evidence = join_parts("no GPU figures (NVML unavailable) and no data wait", *parts)
        advice = HEALTHY_ADVICE_NO_GPU_FIGURES
    else:
        confidence = 0.0
        evidence = "not enough data to judge (no steps and no GPU figures in the window)"
        advice = HEALTHY_ADVICE_NO_DATA
    return Finding(
        category=HEALTHY,
        evidence=evidence,
        confidence=round(confidence, 2),
        severity=0.0,
        numbers=numbers,
        source=signals.source,
        advice_text=advice,
    )
