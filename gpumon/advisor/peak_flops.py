"""Spec-sheet dense peak FLOP/s of known GPUs per precision, and which precision a job's settings compute in.

These are NVIDIA's data-sheet numbers without structured sparsity (the sheets print the sparse figure, twice
these, for tensor cores): the ceiling MFU is measured against, not what a clock-throttled GPU reaches. A GPU not
in the table has no peak (MFU N/A) rather than a guessed one.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.protocol import PrecisionInfo

BF16 = "bf16"
FP16 = "fp16"
TF32 = "tf32"
FP32 = "fp32"

TERA = 1e12


@dataclass(frozen=True, slots=True)
class GpuPeaks:
    """One GPU model's dense peaks, TFLOP/s."""

    model: str
    bf16: float
    tf32: float
    fp32: float

    def tflops(self, precision: str) -> float:
        if precision in (BF16, FP16):
            return self.bf16  # fp16 and bf16 tensor-core peaks are equal on every GPU listed
        return self.tf32 if precision == TF32 else self.fp32


# NVIDIA data sheets; a tensor-core figure printed with sparsity ("1,979 teraFLOPS*") halved.
H100_SXM = GpuPeaks("H100 SXM", bf16=989.5, tf32=494.5, fp32=67.0)
H200 = GpuPeaks("H200", bf16=989.5, tf32=494.5, fp32=67.0)
H100_PCIE = GpuPeaks("H100 PCIe", bf16=756.5, tf32=378.0, fp32=51.0)
A100 = GpuPeaks("A100", bf16=312.0, tf32=156.0, fp32=19.5)
L40S = GpuPeaks("L40S", bf16=362.05, tf32=183.0, fp32=91.6)
A10 = GpuPeaks("A10", bf16=125.0, tf32=62.5, fp32=31.2)


def gpu_peaks(name: str | None) -> GpuPeaks | None:
    """The peaks of a GPU by its CUDA/NVML name ("NVIDIA H100 80GB HBM3"), None when it is not one we know.
    NVL variants (lower clocks and power) and anything ambiguous are left out on purpose."""
    if not name:
        return None
    upper = name.upper().replace("NVIDIA ", "").strip()
    if "NVL" in upper:
        return None
    if "H200" in upper:
        return H200
    if "H100" in upper:
        if "PCIE" in upper:
            return H100_PCIE
        if "HBM3" in upper or "SXM" in upper:
            return H100_SXM
        return None
    if upper.startswith("A100"):
        return A100  # SXM4 and PCIe, 40 and 80 GB: the same dense peaks
    if upper == "L40S":
        return L40S
    if upper == "A10":
        return A10
    return None


def job_precision(precision: PrecisionInfo) -> str:
    """The precision the job's matmuls run in, from the hook's PrecisionInfo: the autocast dtype when an enabled
    CUDA autocast was seen, else TF32 when fp32 matmuls may use it, else fp32."""
    autocast = precision.get("autocast")
    if autocast and autocast.get("enabled") and autocast.get("device_type") == "cuda":
        dtype = autocast.get("dtype", "")
        if dtype.endswith("bfloat16"):
            return BF16
        if dtype.endswith("float16"):
            return FP16
    if precision.get("tf32_matmul") or precision.get("float32_matmul_precision") in ("high", "medium"):
        return TF32
    return FP32


def blended_peak(peaks: GpuPeaks, precision: PrecisionInfo, flops: int, conv_flops: int) -> tuple[float, str]:
    """(peak FLOP/s, its label) for a step of `flops`, `conv_flops` of them in convolutions. Under autocast, the
    autocast dtype's peak. Otherwise matmuls and convolutions may run at different peaks (cuDNN allows TF32 for
    convolutions by default, matmuls do not): the peak is the rate at which the step's FLOPs, each kind at its own
    peak, would run, and the label names both precisions when they differ."""
    matmul = job_precision(precision)
    if matmul in (BF16, FP16):
        return peaks.tflops(matmul) * TERA, matmul
    conv = TF32 if precision.get("tf32_cudnn", True) else FP32
    conv_flops = min(max(0, conv_flops), flops)
    if conv_flops == 0 or conv == matmul:
        precision_used = matmul if conv_flops == 0 else conv
        return peaks.tflops(precision_used) * TERA, precision_used
    other = flops - conv_flops
    seconds = other / (peaks.tflops(matmul) * TERA) + conv_flops / (peaks.tflops(conv) * TERA)
    return flops / seconds, f"{conv} conv/{matmul} matmul"


def peak_flops(name: str | None, precision: str) -> float | None:
    """Dense peak FLOP/s of GPU `name` at `precision`; None for a GPU not in the table."""
    peaks = gpu_peaks(name)
    return None if peaks is None else peaks.tflops(precision) * TERA
