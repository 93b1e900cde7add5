"""The hook's stack-sampler counts as typed records: parsed once from a state message, differenced over a window."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpumon.jobs.numbers import clean_number
from gpumon.protocol import activity

MAX_LINES = 64
"""Lines kept from one state message (the hook sends at most 16)."""


def _count(value: object) -> int:
    return int(clean_number(value) or 0)


def _triple(value: object) -> tuple[int, int, int]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 3:
        return (0, 0, 0)
    return (_count(value[0]), _count(value[1]), _count(value[2]))


@dataclass(frozen=True, slots=True)
class SampledLine:
    """Samples at one line of the job: (GPU idle, GPU busy, GPU state unknown)."""

    file: str
    line: int
    function: str
    activity: str
    counts: tuple[int, int, int]

    @property
    def key(self) -> tuple[str, int, str, str]:
        """What identifies the line: file, line, function and activity."""
        return (self.file, self.line, self.function, self.activity)

    @property
    def idle(self) -> int:
        """Samples at this line with the GPU idle."""
        return self.counts[0]

    @property
    def total(self) -> int:
        """Samples at this line in all."""
        return sum(self.counts)

    def where(self) -> str:
        """'train.py:42 (preprocess)': the file's base name, the line and the function."""
        base = self.file.replace("\\", "/").rsplit("/", 1)[-1] or self.file
        return f"{base}:{self.line} ({self.function})" if self.line else f"{base} ({self.function})"


@dataclass(frozen=True, slots=True)
class HostProfile:
    """Cumulative sampler counts at time `t` (or, from `since`, the counts of a window)."""

    t: float
    hz: float = 0.0
    samples: int = 0
    gpu_state: str | None = None
    """Why the GPU's state was not read, None where it was."""
    activities: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)
    lines: tuple[SampledLine, ...] = ()
    cost_ms: float = 0.0

    @classmethod
    def from_state(cls, host: object, t: float) -> HostProfile | None:
        """From a state message's `host` object; None when it is absent or not an object."""
        if not isinstance(host, Mapping):
            return None
        raw_activities = host.get("activities")
        activities = {
            name: _triple(counts)
            for name, counts in (raw_activities.items() if isinstance(raw_activities, Mapping) else ())
            if name in activity.ACTIVITIES
        }
        lines = []
        raw_lines = host.get("lines")
        for entry in (raw_lines if isinstance(raw_lines, list) else [])[:MAX_LINES]:
            if not isinstance(entry, Mapping):
                continue
            kind = entry.get("activity")
            lines.append(
                SampledLine(
                    file=str(entry.get("file") or "")[:500],
                    line=_count(entry.get("line")),
                    function=str(entry.get("function") or "")[:200],
                    activity=kind if isinstance(kind, str) and kind in activity.ACTIVITIES else activity.OTHER,
                    counts=_triple(entry.get("counts")),
                )
            )
        gpu_state = host.get("gpu_state")
        return cls(
            t=t,
            hz=clean_number(host.get("hz")) or 0.0,
            samples=_count(host.get("samples")),
            gpu_state=gpu_state[:200] if isinstance(gpu_state, str) else None,
            activities=activities,
            lines=tuple(lines),
            cost_ms=clean_number(host.get("cost_ms")) or 0.0,
        )

    def since(self, earlier: HostProfile | None) -> HostProfile:
        """The counts taken after `earlier` (a hook that restarted its counts: all of this one's)."""
        if earlier is None or earlier.samples > self.samples:
            return self
        before = earlier.activities
        activities = {
            name: tuple(max(0, now - then) for now, then in zip(counts, before.get(name, (0, 0, 0)), strict=True))
            for name, counts in self.activities.items()
        }
        old_lines = {line.key: line.counts for line in earlier.lines}
        lines = []
        for line in self.lines:
            then = old_lines.get(line.key, (0, 0, 0))
            counts = tuple(max(0, now - was) for now, was in zip(line.counts, then, strict=True))
            if any(counts):
                lines.append(SampledLine(line.file, line.line, line.function, line.activity, _triple(counts)))
        return HostProfile(
            t=self.t,
            hz=self.hz,
            samples=self.samples - earlier.samples,
            gpu_state=self.gpu_state,
            activities={name: _triple(counts) for name, counts in activities.items()},
            lines=tuple(sorted(lines, key=lambda line: (-line.idle, -line.total))),
            cost_ms=max(0.0, self.cost_ms - earlier.cost_ms),
        )


def window_profile(profiles: Sequence[HostProfile], start: float, end: float) -> HostProfile | None:
    """The sampler's counts between `start` and `end` (hook time): the last profile by `end` less the last one
    before `start` (none before it: all of the last one's counts)."""
    inside = [profile for profile in profiles if profile.t <= end]
    if not inside:
        return None
    last = inside[-1]
    before = [profile for profile in inside if profile.t <= start]
    return last.since(before[-1] if before else None)
