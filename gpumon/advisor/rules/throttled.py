"""throttled: a GPU-bound job whose GPU lowers its own clocks (heat, power, hardware slowdown)."""

from __future__ import annotations

from gpumon.advisor.categories import (
    THROTTLED,
)
from gpumon.advisor.rules.common import (
    Candidate,
    gpu_bound,
    gpu_part,
    join_parts,
    pct,
    rounded,
)
from gpumon.advisor.signal_figures import GpuSignals
from gpumon.advisor.signals import Signals

THROTTLE_SHARE = 0.2
"""Throttled this share of the window (or more) is worth a look."""
POWER_LIMIT_LOWERED_W = 1.0
"""A power limit this many watts or more below the card's default was lowered: nvidia-smi -pl sets whole watts, and
NVML gives both limits in mW, so a limit left at its default reads within a watt of it."""
UNKNOWN_CLOCK_LOSS = 0.25
"""The clock lost while throttled, assumed where the SM clock or its maximum is unknown."""

_THROTTLE_KINDS = (("thermal", "thermal slowdown"), ("power", "power cap"), ("slowdown", "hardware clock slowdown"))


def power_limit_lowered(gpu: GpuSignals) -> bool | None:
    """Whether the GPU's power limit is set below the card's default (None where either limit is unknown)."""
    if gpu.power_limit is None or gpu.power_limit_default is None:
        return None
    return gpu.power_limit <= gpu.power_limit_default - POWER_LIMIT_LOWERED_W


def _worst_throttle(gpu: GpuSignals) -> tuple[str, str, float]:
    """(kind, how to say it, share of the window) of the GPU's most frequent kind of throttling that costs clocks it
    should have: heat, a hardware slowdown, or a power limit set below the card's default. A card held at its default
    limit (or at a limit not known to be lowered) runs as built: that is evidence of a busy GPU, not a problem."""
    power = gpu.throttle_power if power_limit_lowered(gpu) else None
    shares = {"thermal": gpu.throttle_thermal, "power": power, "slowdown": gpu.throttle_slowdown}
    kind, text = max(_THROTTLE_KINDS, key=lambda pair: shares[pair[0]] or 0.0)
    return kind, text, shares[kind] or 0.0


def _watts(gpu: GpuSignals) -> str:
    """ "693 of 700 W", or the limit alone where the draw is unknown."""
    limit = f"{gpu.power_limit:.0f} W" if gpu.power_limit is not None else "? W"
    return f"{gpu.power:.0f} of {limit}" if gpu.power is not None else limit


def power_limit_lines(signals: Signals) -> list[str]:
    """Evidence lines for the job's GPUs held at a power limit that is not lowered, which rule_throttled leaves out:
    e.g. "at its power limit (693 of 700 W, the card's default) 100% of the window"."""
    lines = []
    for gpu in signals.gpu.gpus:
        share = gpu.throttle_power
        if share is None or share < THROTTLE_SHARE:
            continue
        lowered = power_limit_lowered(gpu)
        if lowered:
            continue
        where = f"GPU {gpu.index} " if len(signals.gpu.gpus) > 1 else ""
        if lowered is None:
            why = "; the card's default limit is unknown, so not counted as throttling"
        elif (
            gpu.power_limit_default is not None
            and gpu.power_limit is not None
            and gpu.power_limit > gpu.power_limit_default
        ):
            why = f", raised from the card's default {gpu.power_limit_default:.0f} W"
        else:
            why = ", the card's default"
        lines.append(f"{where}at its power limit ({_watts(gpu)}{why}) {pct(share)} of the window")
    return lines


def rule_throttled(signals: Signals) -> Candidate | None:
    """throttled: a GPU-bound job whose GPU lowers its clocks (thermal, power or hardware slowdown)."""
    if not signals.has_gpu or not gpu_bound(signals):
        return None
    throttled = [(gpu, *_worst_throttle(gpu)) for gpu in signals.gpu.gpus]
    throttled = [entry for entry in throttled if entry[3] >= THROTTLE_SHARE]
    if not throttled:
        return None
    gpu, kind, text, share = max(throttled, key=lambda entry: entry[3])
    clock, top = gpu.throttled_clock_sm, gpu.clock_sm_max
    loss = max(0.0, 1.0 - clock / top) if clock is not None and top else None
    detail = None
    if kind == "thermal" and gpu.throttled_temperature is not None:
        detail = f" at {gpu.throttled_temperature:.0f} C"
    elif kind == "power" and gpu.power_limit_default is not None:
        detail = f" at {_watts(gpu)}, lowered from the card's default {gpu.power_limit_default:.0f} W"
    where = f"GPU {gpu.index}: " if len(signals.gpu.gpus) > 1 else ""
    clock_text = f"SM clock {clock:.0f} of {top:.0f} MHz" if clock is not None and top else None
    evidence = join_parts(f"{where}{text} {pct(share)} of the window{detail or ''}", clock_text, gpu_part(signals))
    numbers = {
        "gpu": gpu.index,
        "reason": kind,
        "share": rounded(share),
        "clock_sm": rounded(clock),
        "clock_sm_max": rounded(top),
        "temperature": rounded(gpu.throttled_temperature),
        "power": rounded(gpu.power),
        "power_limit": rounded(gpu.power_limit),
        "power_limit_default": rounded(gpu.power_limit_default),
        "gpu_util": rounded(signals.gpu.gpu_util),
        "gpu_share": rounded(signals.step.gpu_share),
    }
    severity = share * (loss if loss is not None else UNKNOWN_CLOCK_LOSS)
    return Candidate(THROTTLED, severity, 0.8 if loss is not None else 0.5, evidence, numbers)
