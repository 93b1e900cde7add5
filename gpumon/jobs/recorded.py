"""Hooked jobs in a recording: each job's bounded entry per snapshot written, and read back into views.

An entry holds the hook messages that arrived since the previous one, thinned (the hello once, the latest state with
its stack samples, the last step records and the last budgeted ones, diagnoses, errors, the bye), the per-second
step sums that changed, the rolling stats, the step count and the advisor's finding (added by the recorder). A replay
feeds the messages through a JobState and puts the recorded sums and stats in place of what the thinned records
would give, so the view reads as it did live however fast the job stepped (docs/schema.md, "Job entry").
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from gpumon import protocol
from gpumon.jobs.budget import CumulativeMark
from gpumon.jobs.job_info import JobInfo
from gpumon.jobs.jobstate import (
    END_CLOSED,
    TIMELINE_POINTS,
    Breakdown,
    HookedView,
    JobState,
    RollingStats,
    TimelinePoint,
    group_view,
)
from gpumon.jobs.listener import Listener
from gpumon.jobs.numbers import clean_number
from gpumon.jobs.step_sums import SUM_SECONDS, StepSums

JOB_DATA_VERSION = 1
"""The version of the job entries' format; a reader replays the job data of the versions it knows."""
RECENT_RECORDS = 16
"""Step records kept per entry: the newest of the interval (the view's latest steps)."""
BUDGETED_RECORDS = 8
"""Budgeted step records kept per entry besides them (the step time budget's latest steps)."""
OTHER_MESSAGES = 8
"""Diagnosis, error and bye messages kept per entry (the newest)."""
MAX_JOBS = 64
"""Job entries read per snapshot; more are left out."""


# ---------------------------------------------------------------------------------------------
# Writing: one job's messages between snapshots.


class EntryWriter:
    """Collects one job's messages (on its client's thread) and hands out its entry at each snapshot (bounded)."""

    def __init__(self, info: JobInfo) -> None:
        self.pid = info.pid
        self._lock = threading.Lock()
        self._hello: dict[str, Any] | None = {**info.hello, "type": protocol.HELLO}
        self._state: Mapping[str, Any] | None = None
        self._records: deque[Mapping[str, Any]] = deque(maxlen=RECENT_RECORDS)
        self._budgeted: deque[Mapping[str, Any]] = deque(maxlen=BUDGETED_RECORDS)
        self._hook_stats: Mapping[str, Any] | None = None
        self._steps_t: float | None = None
        self._others: deque[Mapping[str, Any]] = deque(maxlen=OTHER_MESSAGES)
        self._written_second: int | None = None
        self._ended = False

    @property
    def end_written(self) -> bool:
        """Whether the entry saying the job ended was handed out (nothing more will be)."""
        return self._ended

    def take(self, message: Mapping[str, Any]) -> None:
        """One message as the client decoded it (called on the client's thread)."""
        kind = message.get("type")
        with self._lock:
            if kind == protocol.STATE:
                self._state = message
            elif kind == protocol.STEPS:
                records = message.get("records")
                for record in records if isinstance(records, list) else ():
                    if isinstance(record, Mapping):
                        self._records.append(record)
                        if record.get("budget") is not None:
                            self._budgeted.append(record)
                stats = message.get("stats")
                self._hook_stats = stats if isinstance(stats, Mapping) else self._hook_stats
                self._steps_t = clean_number(message.get("t")) or self._steps_t
            elif kind in (protocol.DIAGNOSIS, protocol.ERROR, protocol.BYE):
                self._others.append(message)

    def entry(self, view: HookedView) -> dict[str, Any] | None:
        """The job's entry for this snapshot, from what arrived since the last one and its view now; None once its
        end was written."""
        with self._lock:
            if self._ended:
                return None
            messages: list[Mapping[str, Any]] = []
            if self._hello is not None:
                messages.append(self._hello)
                self._hello = None
            if self._state is not None:
                messages.append(self._state)
            kept = {record.get("seq"): record for record in (*self._budgeted, *self._records)}
            if kept:
                steps: dict[str, Any] = {"type": protocol.STEPS, "records": sorted(kept.values(), key=_seq)}
                if self._steps_t is not None:
                    steps["t"] = self._steps_t
                if self._hook_stats is not None:
                    steps["stats"] = self._hook_stats
                messages.append(steps)
            messages.extend(self._others)
            self._state, self._hook_stats = None, None
            self._records.clear()
            self._budgeted.clear()
            self._others.clear()
            seconds = [
                sums for sums in view.step_sums if self._written_second is None or sums.second >= self._written_second
            ]
            if seconds:
                self._written_second = seconds[-1].second
            entry: dict[str, Any] = {
                "pid": self.pid,
                "messages": messages,
                "seconds": [dataclasses.asdict(sums) for sums in seconds],
                "stats": dataclasses.asdict(view.stats),
                "last_seq": view.last_seq,
                "dropped": view.dropped,
            }
            if view.ended:
                entry["ended"] = {"reason": view.end_reason or END_CLOSED, "exit_code": view.exit_code}
                self._ended = True
            return entry


def _seq(record: Mapping[str, Any]) -> float:
    return clean_number(record.get("seq")) or 0.0


# ---------------------------------------------------------------------------------------------
# Reading: the entries back into views.


class RecordedRank:
    """One recorded hooked process: its messages through a JobState, its recorded sums and stats beside them."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.state = JobState(pid, clock=lambda: 0.0)
        self.sums: dict[int, StepSums] = {}
        self.stats = RollingStats()
        self.last_seq = 0
        self.dropped = 0
        self.finding: Mapping[str, Any] | None = None
        """The advisor's finding as recorded (Finding.to_dict()); None: none yet, or no steps in its window."""
        self.last_message_t: float | None = None

    def add(self, entry: Mapping[str, Any], timestamp: float) -> None:
        """Take one entry of the snapshot at `timestamp`; fields of the wrong kind are left out, as from a hook."""
        messages = entry.get("messages")
        for message in messages if isinstance(messages, list) else ():
            if not isinstance(message, Mapping):
                continue
            try:
                protocol.validate(message)
            except protocol.ProtocolError:
                continue
            if self.state.apply(message) is not None:
                self.last_message_t = timestamp
        seconds = entry.get("seconds")
        for item in seconds if isinstance(seconds, list) else ():
            sums = step_sums_of(item)
            if sums is not None:
                self.sums[sums.second] = sums
        while len(self.sums) > SUM_SECONDS:
            del self.sums[min(self.sums)]
        self.stats = rolling_stats_of(entry.get("stats")) or self.stats
        self.last_seq = _count(entry.get("last_seq"), self.last_seq)
        self.dropped = _count(entry.get("dropped"), self.dropped)
        if "finding" in entry:
            finding = entry.get("finding")
            self.finding = finding if isinstance(finding, Mapping) else None
        ended = entry.get("ended")
        if isinstance(ended, Mapping):
            code = ended.get("exit_code")
            self.state.end(str(ended.get("reason") or END_CLOSED), code if type(code) is int else None)

    def view(self, now: float) -> HookedView:
        """The view as it was at `now` (the recording's time)."""
        sums = tuple(self.sums[second] for second in sorted(self.sums))
        silent = None if self.last_message_t is None else max(0.0, now - self.last_message_t)
        view = self.state.view()
        return dataclasses.replace(
            view,
            stats=self.stats,
            timeline=timeline_of(sums[:-1]),  # the last second may still have been filling
            step_sums=sums,
            last_seq=max(self.last_seq, view.last_seq),
            dropped=self.dropped,
            silent_s=silent,
        )


class RecordedJobs:
    """Every hooked process a recording holds, fed one snapshot's entries at a time (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranks: dict[int, RecordedRank] = {}
        self._now = 0.0
        self._listeners: list[Listener] = []

    def add(self, timestamp: float, entries: Iterable[Mapping[str, Any]]) -> None:
        """The job entries of the snapshot at `timestamp` (called as the replay reaches it)."""
        with self._lock:
            self._now = max(self._now, timestamp)
            for count, entry in enumerate(entries):
                pid = entry.get("pid")
                if count >= MAX_JOBS or type(pid) is not int or pid <= 0:
                    continue
                rank = self._ranks.get(pid)
                if rank is None:
                    if len(self._ranks) >= MAX_JOBS:
                        continue
                    rank = self._ranks[pid] = RecordedRank(pid)
                rank.add(entry, timestamp)
            listeners = list(self._listeners) if self._ranks else []
        for listener in listeners:
            listener(protocol.STEPS)

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` when the recorded jobs change."""
        with self._lock:
            self._listeners.append(listener)

    @property
    def pids(self) -> list[int]:
        """The recorded processes, in the order they first appeared."""
        with self._lock:
            return list(self._ranks)

    def views(self, pids: Iterable[int] | None = None) -> list[HookedView]:
        """The views of `pids` (every recorded process by default) as of the replay's present."""
        with self._lock:
            wanted = list(self._ranks) if pids is None else [pid for pid in pids if pid in self._ranks]
            return [self._ranks[pid].view(self._now) for pid in wanted]

    def finding(self, pid: int) -> Mapping[str, Any] | None:
        """The advisor's finding recorded last for `pid` (Finding.to_dict()), None without one."""
        with self._lock:
            rank = self._ranks.get(pid)
            return rank.finding if rank is not None else None

    def first_job(self) -> RecordedJob | None:
        """The first recorded job (with its ranks), as a JobSource; None before any entry."""
        pids = self.pids
        return RecordedJob(self, pids[0]) if pids else None


class RecordedJob:
    """A recorded job as a JobSource: the first process seen and the ranks that share its job, as replayed."""

    primary = None
    """No hook to send requests to: the job is a recording."""

    def __init__(self, jobs: RecordedJobs, pid: int) -> None:
        self.jobs = jobs
        self._pid = pid

    @property
    def pid(self) -> int:
        """The process this job source follows."""
        return self._pid

    @property
    def ended(self) -> bool:
        """Whether every rank of the job had ended by this point of the recording."""
        return all(view.ended for view in self._rank_views())

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` when the recorded job changes."""
        self.jobs.add_listener(listener)

    def start(self, listener: Listener | None = None) -> None:
        """Begin following the recorded job (nothing to connect to: the replay feeds it)."""
        if listener is not None:
            self.add_listener(listener)

    def stop(self) -> None:
        """Nothing runs: the replay feeds the recorded jobs."""

    def view(self) -> HookedView:
        """The job as recorded, its ranks grouped, this process first."""
        views = self._rank_views()
        return group_view(views, primary=next(i for i, view in enumerate(views) if view.pid == self._pid))

    def finding(self) -> Mapping[str, Any] | None:
        """The advisor's finding recorded last for the job's primary rank."""
        return self.jobs.finding(self._pid)

    def _rank_views(self) -> list[HookedView]:
        views = self.jobs.views()
        first = next(view for view in views if view.pid == self._pid)
        key = first.info.group_key if first.info is not None else None
        if key is None:
            return [first]
        return [view for view in views if view.info is not None and view.info.group_key == key]


# ---------------------------------------------------------------------------------------------
# The recorded figures, read as a hook message is: a field of the wrong kind is left out.


def _count(value: object, default: int) -> int:
    number = clean_number(value)
    return default if number is None else int(number)


def _fields_of(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """The numeric fields of dataclass `cls` that `data` holds as finite, non-negative numbers (ints where int)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        number = clean_number(data.get(field.name))
        if number is None:
            continue
        values[field.name] = int(number) if field.type in ("int", "int | None") else number
    return values


def mark_of(data: object) -> CumulativeMark | None:
    """A budgeted step's cumulative figures (CumulativeMark) from its recorded dict; None where unreadable."""
    if not isinstance(data, Mapping):
        return None
    values = _fields_of(CumulativeMark, data)
    return CumulativeMark(**values) if "seq" in values and "t" in values else None


def step_sums_of(data: object) -> StepSums | None:
    """One second's step sums from its recorded dict; None without its second and step times."""
    if not isinstance(data, Mapping):
        return None
    values = _fields_of(StepSums, data)
    if not {"second", "first_t", "last_t", "first_start"} <= values.keys():
        return None
    return StepSums(**values, first_mark=mark_of(data.get("first_mark")), last_mark=mark_of(data.get("last_mark")))


def rolling_stats_of(data: object) -> RollingStats | None:
    """The rolling stats from their recorded dict; None where it is not one."""
    if not isinstance(data, Mapping):
        return None
    breakdown = data.get("breakdown")
    shares = _fields_of(Breakdown, breakdown) if isinstance(breakdown, Mapping) else {}
    return RollingStats(
        **_fields_of(RollingStats, data), breakdown=Breakdown(**{k: min(1.0, v) for k, v in shares.items()})
    )


def timeline_of(seconds: Iterable[StepSums]) -> tuple[TimelinePoint, ...]:
    """The job's per-second timeline from its step sums, seconds without steps filled in (at most an hour)."""
    points: list[TimelinePoint] = []
    previous: int | None = None
    for sums in seconds:
        if previous is not None:
            for second in range(max(previous + 1, sums.second - TIMELINE_POINTS), sums.second):
                points.append(TimelinePoint(t=float(second), steps=0, samples=0, wall_ms=None, breakdown=Breakdown()))
        previous = sums.second
        points.append(_point(sums))
    return tuple(points[-TIMELINE_POINTS:])


def _point(sums: StepSums) -> TimelinePoint:
    """One second's timeline point, as JobState's timeline makes it from the steps themselves."""
    if sums.steps <= 0 or sums.wall_ms <= 0:
        return TimelinePoint(t=float(sums.second), steps=sums.steps, samples=0, wall_ms=None, breakdown=Breakdown())
    data = min(1.0, sums.data_ms / sums.wall_ms)
    breakdown = Breakdown(data=data, gpu=None, rest=max(0.0, 1.0 - data))
    if sums.timed_steps and sums.timed_wall_ms > 0:
        gpu = max(0.0, min(1.0 - data, sums.gpu_busy_ms / sums.timed_wall_ms))
        breakdown = Breakdown(data=data, gpu=gpu, rest=max(0.0, 1.0 - data - gpu))
    samples = sums.samples if sums.sampled_steps else None
    wall = sums.wall_ms / sums.steps
    return TimelinePoint(
        t=float(sums.second),
        steps=sums.steps,
        samples=samples,
        wall_ms=wall if math.isfinite(wall) else None,
        breakdown=breakdown,
    )
