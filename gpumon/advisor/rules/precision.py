"""low_precision: a busy GPU doing fp32 math where its tensor cores could run bf16 or TF32."""

from __future__ import annotations

from gpumon.advisor.categories import (
    LOW_PRECISION,
)
from gpumon.advisor.peak_flops import FP32, TF32, gpu_peaks
from gpumon.advisor.rules.common import (
    Candidate,
    gpu_busy,
    join_parts,
    pct,
    pct100,
    rounded,
    source_factor,
)
from gpumon.advisor.signals import Signals

TENSOR_LOW = 10.0
TENSOR_NONE = 1.0
"""Where the job's precision settings are unknown (py-spy), tensor-core activity at or above this says some reduced
precision runs already (cuDNN's default TF32 convolutions read 6% on an H200 CNN): only a GPU whose tensor cores do
nothing is told to use them."""


def _reduced_precision(signals: Signals) -> bool | None:
    """True when the job uses bf16/fp16 autocast or TF32 matmuls; None when nothing says."""
    if signals.precision.autocast:
        return True
    if signals.precision.tf32_matmul or signals.precision.float32_matmul_precision in ("high", "medium"):
        return True
    if signals.precision.autocast is None and signals.precision.tf32_matmul is None:
        return None
    return False


def precision_flags(signals: Signals) -> str:
    """The job's precision settings, each as it is: 'no autocast, TF32 off for matmuls, on for cuDNN convolutions'."""
    parts = []
    if signals.precision.autocast is False:
        parts.append("no autocast")
    matmul = signals.precision.tf32_matmul or signals.precision.float32_matmul_precision in ("high", "medium")
    matmul_known = signals.precision.tf32_matmul is not None or signals.precision.float32_matmul_precision is not None
    cudnn = signals.precision.tf32_cudnn
    if matmul_known and cudnn is not None and bool(matmul) == cudnn:
        parts.append(f"TF32 {'on' if cudnn else 'off'}")
    else:
        if matmul_known:
            parts.append(f"TF32 {'on' if matmul else 'off'} for matmuls")
        if cudnn is not None:
            parts.append(
                f"{'on' if cudnn else 'off'} for cuDNN convolutions"
                if matmul_known
                else f"TF32 {'on' if cudnn else 'off'} for cuDNN convolutions"
            )
    return ", ".join(parts)


PRECISION_SEVERITY_UNKNOWN = 0.5
"""The share low precision costs where the GPU's peaks are not known (a GPU outside peak_flops' table)."""


def _precision_gain(signals: Signals) -> tuple[float, str | None]:
    """(severity, its reason): the GPU's busy time, were it all matmul math now at fp32 (or TF32), would run at the
    bf16 tensor-core peak instead: it shrinks by the ratio of the two dense peaks (H200: fp32 67, bf16 989 TFLOP/s,
    so a fully busy fp32 job can gain up to 93%). An upper bound: elementwise kernels gain less."""
    peaks = gpu_peaks(signals.gpu.gpus[0].name) if signals.gpu.gpus else None
    busy = signals.step_model.step_shares.get("gpu_busy")
    if busy is None and signals.gpu.gpu_util is not None:
        busy = signals.gpu.gpu_util / 100.0
    if peaks is None or not busy:
        return PRECISION_SEVERITY_UNKNOWN, None
    current = (
        TF32
        if signals.precision.tf32_matmul or signals.precision.float32_matmul_precision in ("high", "medium")
        else FP32
    )
    ratio = peaks.tflops(current) / peaks.bf16
    share = busy * (1.0 - ratio)
    return (
        share,
        f"bf16 could run the GPU's busy {pct(busy)} at up to {1 / ratio:.0f}x the {current} peak ({peaks.model})",
    )


def rule_precision(signals: Signals) -> Candidate | None:
    if not signals.has_gpu or not gpu_busy(signals):
        return None
    reduced = _reduced_precision(signals)
    tensor = signals.gpu.tensor_activity
    if tensor is not None:
        if tensor >= TENSOR_LOW or reduced is True or (reduced is None and tensor >= TENSOR_NONE):
            return None
        flags = f"fp32 math ({precision_flags(signals)})" if reduced is False else "no reduced-precision math seen"
        severity, gain = _precision_gain(signals)
        evidence = join_parts(
            f"GPU-Util {pct100(signals.gpu.gpu_util)} but tensor-core activity {pct100(tensor)}", flags, gain
        )
        confidence = (0.85 if reduced is False else 0.6) * source_factor(signals)
    else:
        if reduced is not False:
            return None
        evidence = join_parts(
            f"GPU-Util {pct100(signals.gpu.gpu_util)} with fp32 math ({precision_flags(signals)})",
            "no tensor-core figures on this GPU",
        )
        confidence = 0.45
        severity = 0.35
    numbers = {
        "gpu_util": rounded(signals.gpu.gpu_util),
        "sm_activity": rounded(signals.gpu.sm_activity),
        "tensor_activity": rounded(tensor),
        "autocast": signals.precision.autocast,
        "tf32_matmul": signals.precision.tf32_matmul,
        "tf32_cudnn": signals.precision.tf32_cudnn,
    }
    return Candidate(LOW_PRECISION, severity, confidence, evidence, numbers)
