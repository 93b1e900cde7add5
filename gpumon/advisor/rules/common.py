"""What every rule shares: the Finding and Candidate records, the bar for naming a cause, confidences, and the
formatting of evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpumon import units
from gpumon.advisor.categories import (
    ADVICE,
    HEADLINES,
)
from gpumon.advisor.signals import SOURCE_PYSPY, Signals

MIN_SEVERITY = 0.15
"""A candidate costing less than this share of the time is not worth naming."""
PYSPY_CONFIDENCE = 0.7
"""Confidence factor for figures estimated from py-spy samples rather than measured by the hook."""
SOURCE_LINE_CONFIDENCE = 0.5
"""The py-spy sync confidence where the syncs were only read from source lines (without --native)."""

BUSY_UTIL = 80.0
BUSY_SM = 40.0

GPU_BOUND_SHARE = 0.6
"""The hook's GPU share of each step at or above which the job is GPU-bound."""

STEP_MODEL_CONFIDENCE = 0.85
"""The step model with GPU busy from GPU-Util and the idle time split by the hook's samples: measured; not 1, a
sample is a sample."""
STREAM_STEP_MODEL_CONFIDENCE = 0.7
"""The same with GPU busy from the training stream's state at the samples (no NVML), which reads idler than it is
under launch-heavy loads (jobs.step_model)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis: a category of the vocabulary, its evidence in one line, the numbers behind it."""

    category: str
    evidence: str
    confidence: float
    severity: float = 0.0
    numbers: Mapping[str, Any] = field(default_factory=dict)
    secondary: tuple[Finding, ...] = ()
    source: str = ""
    advice_text: str = ""
    """What to do where the category's general ADVICE would not fit the evidence (a healthy job on the CPU...)."""

    @property
    def headline(self) -> str:
        return HEADLINES[self.category]

    @property
    def advice(self) -> str:
        return self.advice_text or ADVICE[self.category]

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "headline": self.headline,
            "evidence": self.evidence,
            "confidence": round(self.confidence, 2),
            "severity": round(self.severity, 3),
            "numbers": dict(self.numbers),
            "advice": self.advice,
            "source": self.source,
            "secondary": [finding.to_dict() for finding in self.secondary],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            category=str(data["category"]),
            evidence=str(data.get("evidence", "")),
            confidence=float(data.get("confidence", 0.0)),
            severity=float(data.get("severity", 0.0)),
            numbers=dict(data.get("numbers") or {}),
            source=str(data.get("source", "")),
            secondary=tuple(cls.from_dict(d) for d in data.get("secondary") or ()),
            advice_text=_own_advice(str(data["category"]), data.get("advice")),
        )


def _own_advice(category: str, advice: object) -> str:
    """The advice a serialized finding carries, where it is not its category's general one."""
    return advice if isinstance(advice, str) and advice != ADVICE.get(category) else ""


# ---------------------------------------------------------------------------------------------
# Formatting evidence.


def pct(share: float | None) -> str:
    """A 0-1 share as a whole percent."""
    return units.share(share, missing="?")


def pct100(value: float | None) -> str:
    """A 0-100 figure as a percent (one decimal under 10)."""
    return units.percent(value, fine=True, missing="?")


def rate(bytes_per_s: float | None) -> str:
    """Bytes per second in decimal units: '1.1 GB/s'."""
    return units.rate(bytes_per_s, missing="?")


def gib(value: float | None) -> str:
    """Bytes in binary units: '1.5 GiB'."""
    return units.size(value, missing="?")


def join_parts(*parts: str | None) -> str:
    return "; ".join(part for part in parts if part)


def rounded(value: Any, digits: int = 3) -> Any:
    return round(value, digits) if isinstance(value, float) else value


# ---------------------------------------------------------------------------------------------
# The rules.


@dataclass(frozen=True, slots=True)
class Candidate:
    category: str
    severity: float
    confidence: float
    evidence: str
    numbers: Mapping[str, Any]


def source_factor(signals: Signals) -> float:
    return PYSPY_CONFIDENCE if signals.source == SOURCE_PYSPY else 1.0


def gpu_part(signals: Signals) -> str | None:
    if signals.gpu.gpu_util is None:
        return None
    text = f"GPU-Util {pct100(signals.gpu.gpu_util)}"
    if signals.gpu.sm_activity is not None:
        text += f", SM activity {pct100(signals.gpu.sm_activity)}"
    return text


def cores_part(signals: Signals) -> str | None:
    if signals.host.idle_cores is None or signals.host.cores is None:
        return None
    return f"{signals.host.idle_cores} of {signals.host.cores} cores idle"


def nvml_idle(signals: Signals) -> float | None:
    """Share of the time the GPU does nothing, from NVML (GPU-Util)."""
    if signals.gpu.gpu_util is None:
        return None
    return max(0.0, 1.0 - signals.gpu.gpu_util / 100.0)


def step_model_confidence(signals: Signals) -> float:
    base = STEP_MODEL_CONFIDENCE if signals.step_model.step_busy_from == "nvml" else STREAM_STEP_MODEL_CONFIDENCE
    return base * source_factor(signals)


def gpu_busy(signals: Signals) -> bool:
    util, sm = signals.gpu.gpu_util, signals.gpu.sm_activity
    return util is not None and util >= BUSY_UTIL and (sm is None or sm >= BUSY_SM)


def gpu_bound(signals: Signals) -> bool:
    """The GPU is what limits the job: busy by NVML, or covering most of each step by the hook's CUDA events."""
    return gpu_busy(signals) or (signals.step.gpu_share is not None and signals.step.gpu_share >= GPU_BOUND_SHARE)


def as_finding(candidate: Candidate, source: str) -> Finding:
    return Finding(
        category=candidate.category,
        evidence=candidate.evidence,
        confidence=round(min(1.0, candidate.confidence), 2),
        severity=round(candidate.severity, 3),
        numbers=candidate.numbers,
        source=source,
    )
