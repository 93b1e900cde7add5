"""When a diagnosis profiles the job on its own: distributed jobs and GPU idle the step model cannot explain."""

from __future__ import annotations

from gpumon.advisor.auto_capture import UNEXPLAINED_IDLE, capture_reason
from gpumon.advisor.signals import Signals


def test_distributed_jobs_and_unexplained_idle_are_profiled() -> None:
    plain = Signals.of(step_shares={"gpu_busy": 0.6, "data": 0.3, "other": 0.1})
    assert capture_reason(plain, None) is None
    assert capture_reason(plain, 1) is None
    reason = capture_reason(plain, 2)
    assert reason is not None and "2 ranks" in reason
    unexplained = Signals.of(step_shares={"gpu_busy": 0.5, "other": UNEXPLAINED_IDLE + 0.01})
    reason = capture_reason(unexplained, None)
    assert reason is not None and "no host activity" in reason
    assert capture_reason(Signals.of(), None) is None  # no step model: nothing says the idle is unexplained
