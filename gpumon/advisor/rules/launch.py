"""launch_bound: the kernels are too small for the GPU, so torch's dispatch and launches set the pace."""

from __future__ import annotations

from gpumon.advisor.categories import (
    LAUNCH_BOUND,
)
from gpumon.advisor.rules.common import (
    PYSPY_CONFIDENCE,
    Candidate,
    gpu_part,
    join_parts,
    pct,
    pct100,
    rounded,
    source_factor,
    step_model_confidence,
)
from gpumon.advisor.rules.data import DATA_SHARE_INPUT
from gpumon.advisor.rules.sync import MANY_SYNCS
from gpumon.advisor.rules.transfer import PCIE_TRANSFER
from gpumon.advisor.signals import SATURATED_CPU, SOURCE_PYSPY, Signals

LAUNCH_SM = 20.0
LAUNCH_SM_TO_UTIL = 0.35
LAUNCH_STEPS_PER_S = 100.0
LAUNCH_MAIN_SHARE = 0.5
"""Under 10% GPU-Util, launch_bound needs the main thread launching (torch's model, autograd, optimizer) this share
of the time."""


def rule_launch(signals: Signals) -> Candidate | None:
    if not signals.has_gpu or signals.gpu.gpu_util is None:
        return None
    if (signals.step.data_share or 0.0) >= DATA_SHARE_INPUT or (signals.step.syncs_per_step or 0.0) >= MANY_SYNCS:
        return None
    if (signals.gpu.pcie_rx or 0.0) + (signals.gpu.pcie_tx or 0.0) >= PCIE_TRANSFER:
        return None  # the GPU waits on copies (transfer_bound), not on kernel launches
    util, sm = signals.gpu.gpu_util, signals.gpu.sm_activity
    steps = signals.step.steps_per_s
    per_step = signals.step.samples_per_step
    step_text = None
    if steps is not None:
        step_text = f"{steps:.0f} steps/s" + (f" of {per_step:.0f} samples" if per_step else "")
    main_text = f"main process at {pct100(signals.host.main_cpu)} CPU" if signals.host.main_cpu is not None else None
    numbers = {
        "gpu_util": rounded(util),
        "sm_activity": rounded(sm),
        "steps_per_s": rounded(steps),
        "samples_per_step": rounded(per_step),
        "main_cpu": rounded(signals.host.main_cpu),
    }
    if sm is not None:
        # Under 10% GPU-Util the GPU may simply have no work; the main thread launching most of the time (py-spy's
        # forward/backward/optimizer samples, or the step model's idle while torch dispatches) says it does.
        if signals.source == SOURCE_PYSPY:
            launching = sum(signals.pyspy.shares.get(phase, 0.0) for phase in ("forward", "backward", "optimizer"))
        else:
            launching = signals.step_model.step_shares.get("launch", 0.0)
        if sm >= LAUNCH_SM or (util < 10 and launching < LAUNCH_MAIN_SHARE) or sm / max(util, 1e-9) > LAUNCH_SM_TO_UTIL:
            return None
        evidence = join_parts(
            f"GPU-Util {pct100(util)} but SM activity {pct100(sm)}: the kernels are tiny", step_text, main_text
        )
        confidence = 0.8 if signals.host.main_cpu is None or signals.host.main_cpu >= SATURATED_CPU else 0.65
        return Candidate(LAUNCH_BOUND, 1.0 - sm / 100.0, confidence * source_factor(signals), evidence, numbers)
    # Without GPM: many small steps, a GPU far from busy and a CPU-bound main process.
    if steps is None or steps < LAUNCH_STEPS_PER_S or util >= 60:
        return None
    if signals.host.main_cpu is not None and signals.host.main_cpu < SATURATED_CPU:
        return None
    evidence = join_parts(f"{step_text} with GPU-Util {pct100(util)} (no SM activity figures on this GPU)", main_text)
    return Candidate(LAUNCH_BOUND, (1.0 - util / 100.0) * 0.8, 0.4 * source_factor(signals), evidence, numbers)


def launch_evidence(signals: Signals, share: float) -> Candidate:
    """launch_bound from the step model: the GPU idles while the training thread is in torch's dispatch and kernel
    launches (forward, backward, the optimizer); SM activity against GPU-Util says whether the kernels are tiny."""
    util, sm = signals.gpu.gpu_util, signals.gpu.sm_activity
    steps, per_step = signals.step.steps_per_s, signals.step.samples_per_step
    tiny = sm is not None and util is not None and util > 0 and sm / util <= LAUNCH_SM_TO_UTIL
    evidence = join_parts(
        f"the GPU idles {pct(share)} of the time while the training thread is in torch's dispatch and launches",
        f"{steps:.0f} steps/s" + (f" of {per_step:.0f} samples" if per_step else "") if steps is not None else None,
        f"GPU-Util {pct100(util)} but SM activity {pct100(sm)}: the kernels are tiny" if tiny else gpu_part(signals),
        f"main process at {pct100(signals.host.main_cpu)} CPU" if signals.host.main_cpu is not None else None,
    )
    numbers = {
        "launch_idle": rounded(share),
        "gpu_util": rounded(util),
        "sm_activity": rounded(sm),
        "steps_per_s": rounded(steps),
        "samples_per_step": rounded(per_step),
        "main_cpu": rounded(signals.host.main_cpu),
        "busy_from": signals.step_model.step_busy_from,
    }
    confidence = step_model_confidence(signals) if signals.source != SOURCE_PYSPY else 0.6 * PYSPY_CONFIDENCE
    return Candidate(LAUNCH_BOUND, share, confidence, evidence, numbers)
