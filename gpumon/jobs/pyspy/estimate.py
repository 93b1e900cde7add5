"""EstimateView: what py-spy's samples of a job's main thread say so far, a frozen copy safe on any thread."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpumon.jobs.pyspy.categories import CATEGORIES, METHOD_LABEL, SYNC_EVIDENCE, fractions

RATE = 50
"""Samples per second py-spy takes (of every thread; the main thread's are kept)."""
ROUND_S = 1
"""Seconds per py-spy run (py-spy takes whole seconds); each run ends with one estimate update."""
RECENT_ROUNDS = 5
"""The 'recent' estimate covers this many rounds."""
TIMELINE_ROUNDS = 3600


@dataclass(frozen=True, slots=True)
class EstimateView:
    """What the py-spy sampler has estimated so far about a job's main thread."""

    pid: int
    command: str = ""
    rate: int = RATE
    round_s: int = ROUND_S
    rounds: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    """Main-thread samples per category since the start."""
    recent: Mapping[str, int] = field(default_factory=dict)
    """The same over the last RECENT_ROUNDS rounds."""
    timeline: tuple[Mapping[str, float], ...] = ()
    """Per round: the fraction of each category."""
    hot_frames: Mapping[str, str] = field(default_factory=dict)
    """Per category, the most frequent innermost frame in the recent rounds (for a CUDA sync and the job's own code:
    the job's own frame)."""
    sync_evidence: Mapping[str, int] = field(default_factory=dict)
    """CUDA sync samples since the start by how they were recognised (SYNC_EVIDENCE)."""
    recent_sync_evidence: Mapping[str, int] = field(default_factory=dict)
    native: bool = False
    """Sampled with py-spy --native (C/C++ frames seen)."""
    ended: bool = False
    end_reason: str | None = None
    started: float = 0.0
    method: str = METHOD_LABEL

    @property
    def samples(self) -> int:
        """Main-thread samples since the start."""
        return sum(self.counts.values())

    @property
    def recent_samples(self) -> int:
        """Main-thread samples over the last RECENT_ROUNDS rounds."""
        return sum(self.recent.values())

    @property
    def fractions(self) -> dict[str, float]:
        """Each category's share of the samples since the start."""
        return fractions(self.counts)

    @property
    def recent_fractions(self) -> dict[str, float]:
        """Each category's share of the recent samples."""
        return fractions(self.recent)

    @property
    def dominant(self) -> str | None:
        """The category with the most recent samples (since the start before any recent), None without samples."""
        counts = self.recent or self.counts
        return max(CATEGORIES, key=lambda c: counts.get(c, 0)) if sum(counts.values()) else None

    @property
    def pids(self) -> list[int]:
        """The job's processes: py-spy samples one."""
        return [self.pid]

    @property
    def worker_pids(self) -> list[int]:
        """Unknown without the hook."""
        return []

    @property
    def device_uuids(self) -> list[str]:
        """Unknown without the hook."""
        return []

    def to_dict(self) -> dict[str, object]:
        """The `--json` line for this estimate."""
        return {
            "type": "estimate",
            "pid": self.pid,
            "method": "py-spy",
            "estimate": True,
            "rate": self.rate,
            "rounds": self.rounds,
            "samples": self.samples,
            "counts": {c: self.counts.get(c, 0) for c in CATEGORIES},
            "fractions": {c: round(v, 4) for c, v in self.fractions.items()},
            "recent_samples": self.recent_samples,
            "recent_fractions": {c: round(v, 4) for c, v in self.recent_fractions.items()},
            "hot_frames": dict(self.hot_frames),
            "ended": self.ended,
            "end_reason": self.end_reason,
            "sync_evidence": {how: self.sync_evidence.get(how, 0) for how in SYNC_EVIDENCE},
            "recent_sync_evidence": {how: self.recent_sync_evidence.get(how, 0) for how in SYNC_EVIDENCE},
            "native": self.native,
        }
