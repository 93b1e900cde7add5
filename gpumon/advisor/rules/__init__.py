"""The diagnosis: the step model's owners of GPU idle time mapped to categories (owners.py), one module per category
with its thresholds, evidence and advice, and the verdict (verdict.py) that names the largest."""

from gpumon.advisor.rules.comm import COMM_EXPOSED_SHARE, rule_comm
from gpumon.advisor.rules.common import MIN_SEVERITY, Candidate, Finding, gpu_bound, gpu_busy
from gpumon.advisor.rules.straggler import rule_straggler
from gpumon.advisor.rules.throttled import rule_throttled
from gpumon.advisor.rules.verdict import HEALTHY_BUSY, diagnose

__all__ = [
    "COMM_EXPOSED_SHARE",
    "HEALTHY_BUSY",
    "MIN_SEVERITY",
    "Candidate",
    "Finding",
    "diagnose",
    "gpu_bound",
    "gpu_busy",
    "rule_comm",
    "rule_straggler",
    "rule_throttled",
]
