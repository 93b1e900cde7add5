"""What the monitor knows about one hooked job: bounded step history, per-second timeline, rolling stats, latest state.

JobState is fed protocol messages (by JobClient's thread, or from a recording in tests) and hands out frozen
HookedView copies that a UI can read on its own thread.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpumon import protocol
from gpumon.jobs.budget import BudgetShares, StepTimeBudget
from gpumon.jobs.gc_totals import GcPoint
from gpumon.jobs.host_profile import HostProfile
from gpumon.jobs.job_info import JobInfo
from gpumon.jobs.numbers import clean_number
from gpumon.jobs.step_sums import StepSums, StepSumsLog

HISTORY_STEPS = 4096
"""Step records kept per job."""
HOST_PROFILES = 1800
HOST_EVERY_S = 0.9
"""The stack sampler's counts (and the collector's totals) kept: one state a second at most, for half an hour (about
2 KB each)."""
RECENT_STEPS = 512
"""Step records copied into each HookedView."""
TIMELINE_POINTS = 3600
"""Per-second points kept (an hour)."""
BUCKET_S = 1.0
LATE_GRACE_S = 0.5
"""A second of the timeline is closed once a message from this long after its end arrives."""
STATS_WINDOW_S = 5.0
"""Rolling stats cover the steps that ended in this many seconds before the newest message."""

END_EXIT = "exit"
END_CLOSED = "connection closed"


@dataclass(frozen=True, slots=True)
class StepPoint:
    """One training step as the hook measured it (times in milliseconds)."""

    seq: int
    t: float
    wall_ms: float
    data_ms: float
    gpu_ms: float | None
    samples: int | None
    source: str
    syncs: int | None = None
    budget: StepTimeBudget | None = None
    """Where the step's time went, on the steps the hook budgets (one in 16)."""
    comm_ms: float | None = None
    """GPU-timed steps: the training stream's wait in torch.distributed collectives (None: not timed, or none)."""

    @property
    def gpu_busy_ms(self) -> float | None:
        """GPU time that does not overlap the data wait (the GPU runs ahead asynchronously), at most the step."""
        if self.gpu_ms is None:
            return None
        return max(0.0, min(self.gpu_ms, self.wall_ms - self.data_ms))

    @property
    def rest_ms(self) -> float:
        """The step's time neither waiting for data nor covered by GPU work (host time with the GPU idle)."""
        return max(0.0, self.wall_ms - self.data_ms - (self.gpu_busy_ms or 0.0))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> StepPoint | None:
        """The step a hook's step record describes; None for a record without its required fields."""
        try:
            gpu = record.get("gpu_ms")
            samples = record.get("samples")
            syncs = record.get("syncs")
            comm = record.get("comm_ms")
            seq = int(record["seq"])
            t = float(record["t"])
            return cls(
                seq=seq,
                t=t,
                wall_ms=float(record["wall_ms"]),
                data_ms=float(record.get("data_ms") or 0.0),
                gpu_ms=None if gpu is None else float(gpu),
                samples=None if samples is None else int(samples),
                source=str(record.get("source", "")),
                syncs=None if syncs is None else int(syncs),
                budget=StepTimeBudget.from_record(record.get("budget"), seq, t),
                comm_ms=None if comm is None else max(0.0, float(comm)),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where the wall time of some steps went, as shares of it (0-1). gpu/rest are None without GPU timing."""

    data: float | None = None
    gpu: float | None = None
    rest: float | None = None

    @classmethod
    def of(cls, steps: Sequence[StepPoint]) -> Breakdown:
        """Where the wall time of `steps` went (GPU and rest only from the GPU-timed ones)."""
        wall = sum(step.wall_ms for step in steps)
        if not steps or wall <= 0:
            return cls()
        data = min(1.0, sum(step.data_ms for step in steps) / wall)
        timed = [step for step in steps if step.gpu_ms is not None]
        timed_wall = sum(step.wall_ms for step in timed)
        if not timed or timed_wall <= 0:
            return cls(data=data, gpu=None, rest=max(0.0, 1.0 - data))
        gpu = min(1.0 - data, sum(step.gpu_busy_ms or 0.0 for step in timed) / timed_wall)
        return cls(data=data, gpu=max(0.0, gpu), rest=max(0.0, 1.0 - data - max(0.0, gpu)))


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """One second of the job: how many steps ended in it, their throughput and where their time went."""

    t: float
    """Start of the second (unix time)."""
    steps: int
    samples: int | None
    wall_ms: float | None
    """Mean step time of the steps that ended in this second."""
    breakdown: Breakdown

    @property
    def steps_per_s(self) -> float:
        """Steps that ended in this second, per second."""
        return self.steps / BUCKET_S

    @property
    def samples_per_s(self) -> float | None:
        """Samples of the steps that ended in this second, per second (None: not counted)."""
        return None if self.samples is None else self.samples / BUCKET_S


@dataclass(frozen=True, slots=True)
class RollingStats:
    """Means and rates over the last STATS_WINDOW_S seconds of steps."""

    window_s: float = 0.0
    steps: int = 0
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    wall_ms: float | None = None
    data_ms: float | None = None
    gpu_ms: float | None = None
    rest_ms: float | None = None
    breakdown: Breakdown = field(default_factory=Breakdown)

    @classmethod
    def of(cls, steps: Sequence[StepPoint], now: float) -> RollingStats:
        """The stats of the steps that ended within STATS_WINDOW_S of `now`."""
        window = [step for step in steps if now - step.t <= STATS_WINDOW_S]
        if not steps:
            return cls()
        oldest = window[0] if window else None
        span = STATS_WINDOW_S
        if oldest is not None and len(window) == len(steps):
            span = min(STATS_WINDOW_S, max(0.0, now - (oldest.t - oldest.wall_ms / 1e3)))
        if not window:
            return cls(window_s=span, steps=0, steps_per_s=0.0, samples_per_s=0.0)
        count = len(window)
        samples = [step.samples for step in window if step.samples is not None]
        timed = [step.gpu_ms for step in window if step.gpu_ms is not None]
        return cls(
            window_s=span,
            steps=count,
            steps_per_s=count / span if span > 0 else None,
            samples_per_s=sum(samples) / span if samples and span > 0 else None,
            wall_ms=sum(step.wall_ms for step in window) / count,
            data_ms=sum(step.data_ms for step in window) / count,
            gpu_ms=sum(timed) / len(timed) if timed else None,
            rest_ms=sum(step.rest_ms for step in window) / count,
            breakdown=Breakdown.of(window),
        )


@dataclass(frozen=True, slots=True)
class RankSummary:
    """One rank of a distributed job, for the per-rank table."""

    rank: int | None
    pid: int
    steps_per_s: float | None
    wall_ms: float | None
    data_ms: float | None
    gpu_ms: float | None
    ended: bool
    breakdown: Breakdown = field(default_factory=Breakdown)
    """Where this rank's step time went (its own budget)."""


STRAGGLER_THRESHOLD = 0.10
"""How far a rank must stand out (its step over the others' median, or its data wait's share) to be the straggler."""


def find_straggler(ranks: Sequence[RankSummary], threshold: float = STRAGGLER_THRESHOLD) -> int | None:
    """The pid of the rank that holds the others back, or None when none stands out by more than `threshold`.

    Ranks that run unsynchronised: the one with the longest mean step. Ranks kept in lockstep by collectives
    (step times within the threshold): the one that waits longest for its data, since the others then wait
    for it inside their all-reduce.
    """
    live = [r for r in ranks if r.wall_ms is not None and not r.ended]
    if len(live) < 2:
        return None
    slowest = max(live, key=lambda r: r.wall_ms or 0.0)
    others = sorted(r.wall_ms or 0.0 for r in live if r is not slowest)
    median = others[len(others) // 2]
    if median > 0 and (slowest.wall_ms or 0.0) > median * (1 + threshold):
        return slowest.pid
    hungriest = max(live, key=lambda r: r.data_ms or 0.0)
    other_waits = sorted(r.data_ms or 0.0 for r in live if r is not hungriest)
    median_wait = other_waits[len(other_waits) // 2]
    wall = hungriest.wall_ms or 0.0
    if wall > 0 and ((hungriest.data_ms or 0.0) - median_wait) / wall > threshold:
        return hungriest.pid
    return None


@dataclass(frozen=True, slots=True)
class HookedView:
    """A consistent copy of what is known about one hooked job (or the primary rank of a group)."""

    pid: int
    info: JobInfo | None = None
    connected: bool = False
    waiting: str | None = None
    """Why there is no connection yet (e.g. waiting for the launched job to start training), None once connected."""
    ended: bool = False
    end_reason: str | None = None
    exit_code: int | None = None
    steps: tuple[StepPoint, ...] = ()
    timeline: tuple[TimelinePoint, ...] = ()
    stats: RollingStats = field(default_factory=RollingStats)
    hook_stats: Mapping[str, Any] = field(default_factory=dict)
    state: protocol.State | None = None
    """The latest state message, as its TypedDict (protocol.conform: its fields need no type checks)."""
    last_seq: int = 0
    dropped: int = 0
    protocol_errors: int = 0
    last_error: str | None = None
    silent_s: float | None = None
    """Seconds since the last message (None before any)."""
    diagnosis: protocol.Diagnosis | None = None
    ranks: tuple[RankSummary, ...] = ()
    straggler: int | None = None
    """Pid of the straggling rank, when ranks are shown and one stands out."""
    step_sums: tuple[StepSums, ...] = ()
    """Per-second sums of every step of the last hour (the advisor's whole-window figures)."""
    host_profiles: tuple[HostProfile, ...] = ()
    """The stack sampler's cumulative counts, at most one a second, oldest first (the advisor differences them)."""
    gc_points: tuple[GcPoint, ...] = ()
    """The collector's cumulative totals from the state, at most one a second, oldest first."""

    @property
    def command(self) -> str:
        """The job's command line ('' before its hello)."""
        return self.info.command if self.info is not None else ""

    @property
    def memory(self) -> protocol.MemoryInfo | None:
        """The job's CUDA memory figures from its latest state."""
        return self.state.get("memory") if self.state is not None else None

    @property
    def dataloaders(self) -> list[protocol.DataLoaderInfo]:
        """The job's DataLoaders from its latest state (workers, pinning, prefetch)."""
        return (self.state.get("dataloaders") if self.state is not None else None) or []

    @property
    def precision(self) -> protocol.PrecisionInfo:
        """The job's precision settings (autocast, TF32) from its latest state."""
        return (self.state.get("precision") if self.state is not None else None) or {}

    @property
    def step_source(self) -> str | None:
        """What marks the job's steps (an optimizer, a DataLoader, the script), once known."""
        source = self.state.get("step_source") if self.state is not None else None
        return source or (self.steps[-1].source if self.steps else None)

    @property
    def cuda(self) -> protocol.CudaInfo:
        """The job's CUDA figures: the latest state's, else its hello's."""
        cuda = self.state.get("cuda") if self.state is not None else None
        if cuda is not None:
            return cuda
        return self.info.cuda if self.info is not None else {}

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the DataLoader workers of every loader the job uses."""
        pids: list[int] = []
        for loader in self.dataloaders:
            for pid in loader.get("worker_pids") or ():
                if pid not in pids:
                    pids.append(pid)
        return pids

    @property
    def device_uuids(self) -> list[str]:
        """UUIDs of the GPU(s) the job computes on: its step device, else every device it sees."""
        devices = self.cuda.get("devices") or []
        device = self.cuda.get("device")
        chosen = [d for d in devices if d.get("index") == device] if device is not None else []
        return [uuid for d in chosen or devices if (uuid := d.get("uuid"))]

    @property
    def budget(self) -> BudgetShares:
        """The step time budget over the recent budgeted steps (empty, steps 0, before the first)."""
        return BudgetShares.of(step.budget for step in self.steps if step.budget is not None)

    @property
    def optimizers(self) -> list[protocol.OptimizerInfo]:
        """The optimizers the job steps, with where their parameters live (empty: none seen, or an older hook)."""
        return (self.state.get("optimizers") if self.state is not None else None) or []

    @property
    def optimizer_on_cpu(self) -> bool | None:
        """Whether an optimizer's parameters (some or all) live on the CPU while the job has initialized CUDA: its
        gradients go down and its weights up every step. False for a job without CUDA; None: no optimizer known."""
        devices = [optimizer.get("params_device") for optimizer in self.optimizers]
        if not devices:
            return None
        if not self.cuda.get("initialized"):
            return False
        return any(device in ("cpu", "mixed") for device in devices)

    @property
    def optimizer_host_bytes(self) -> int | None:
        """The bytes of the optimizers' parameters on the CPU (those of optimizers offloaded to the host), None where
        no optimizer is known or the hook does not say (an older hook)."""
        sizes = [optimizer.get("host_bytes") for optimizer in self.optimizers]
        known = [size for size in sizes if isinstance(size, int)]
        return sum(known) if known else None

    @property
    def empty_cache_sites(self) -> tuple[str, ...]:
        """ "file:line (count)" of the lines that called torch.cuda.empty_cache() most, most first."""
        sites = (self.state.get("empty_cache_sites") if self.state is not None else None) or []
        return tuple(f"{site.get('file', '?')}:{site.get('line', 0)} ({site.get('count', 0)})" for site in sites)

    @property
    def pids(self) -> list[int]:
        """The job's processes: every rank's pid."""
        return [r.pid for r in self.ranks] if self.ranks else [self.pid]


class _Bucket:
    __slots__ = ("index", "steps")

    def __init__(self, index: int) -> None:
        self.index = index
        self.steps: list[StepPoint] = []

    def point(self) -> TimelinePoint:
        """The timeline point of the steps seen so far this second."""
        steps = self.steps
        samples = [step.samples for step in steps if step.samples is not None]
        return TimelinePoint(
            t=self.index * BUCKET_S,
            steps=len(steps),
            samples=sum(samples) if samples else (0 if not steps else None),
            wall_ms=sum(step.wall_ms for step in steps) / len(steps) if steps else None,
            breakdown=Breakdown.of(steps),
        )


class JobState:
    """Thread-safe accumulation of one job's messages; `view()` copies it out."""

    def __init__(self, pid: int, *, history_steps: int = HISTORY_STEPS, clock: Any = time.monotonic) -> None:
        self.pid = pid
        self._lock = threading.Lock()
        self._clock = clock
        self._info: JobInfo | None = None
        self._socket_path = ""
        self._steps: deque[StepPoint] = deque(maxlen=history_steps)
        self._timeline: deque[TimelinePoint] = deque(maxlen=TIMELINE_POINTS)
        self._bucket: _Bucket | None = None
        self._step_sums = StepSumsLog()
        self._hook_stats: Mapping[str, Any] = {}
        self._state: protocol.State | None = None
        self._host: deque[HostProfile] = deque(maxlen=HOST_PROFILES)
        self._gc: deque[GcPoint] = deque(maxlen=HOST_PROFILES)
        self._now = 0.0
        """The hook's clock: the newest message or record time seen."""
        self._last_seq = 0
        self._dropped = 0
        self._protocol_errors = 0
        self._last_error: str | None = None
        self._last_message: float | None = None
        self._diagnosis: protocol.Diagnosis | None = None
        self.connected = False
        self.waiting: str | None = None
        self.ended = False
        self.end_reason: str | None = None
        self.exit_code: int | None = None

    # -- feeding ---------------------------------------------------------------------------------

    def set_socket_path(self, path: str) -> None:
        """The socket the messages come from, for the JobInfo a hello makes."""
        self._socket_path = path

    def apply(self, message: Mapping[str, Any]) -> str | None:
        """Take one decoded message; return its type when it changed what a view shows, else None."""
        kind = message.get("type")
        if not isinstance(kind, str):
            kind = None
        with self._lock:
            self._last_message = self._clock()
            message_t = clean_number(message.get("t"))
            if kind == protocol.HELLO:
                pid = message.get("pid")
                self._info = JobInfo.of(pid if isinstance(pid, int) else self.pid, self._socket_path, message)
                self.connected = True
                self.waiting = None
                started = clean_number(message.get("started"))
                if started is not None:
                    self._now = max(self._now, started)
                return kind
            if kind == protocol.STEPS:
                self._take_steps(message)
                if message_t is not None:
                    self._advance(message_t)
                return kind
            if kind == protocol.STATE:
                self._state = protocol.conform(protocol.State, message)
                if message_t is not None:
                    self._advance(message_t)
                    profile = HostProfile.from_state(message.get("host"), message_t)
                    if profile is not None and (not self._host or message_t - self._host[-1].t >= HOST_EVERY_S):
                        self._host.append(profile)
                    point = GcPoint.from_state(message.get("gc"), message_t)
                    if point is not None and (not self._gc or message_t - self._gc[-1].t >= HOST_EVERY_S):
                        self._gc.append(point)
                return kind
            if kind == protocol.DIAGNOSIS:
                self._diagnosis = protocol.conform(protocol.Diagnosis, message)
                return kind
            if kind == protocol.ERROR:
                self._last_error = f"{message.get('code')}: {message.get('message')}"
                return kind
            if kind == protocol.BYE:
                self._end(str(message.get("reason") or END_EXIT))
                return kind
        return None

    def protocol_error(self, error: str) -> None:
        """Count a line that could not be read, keeping its error as the last one."""
        with self._lock:
            self._protocol_errors += 1
            self._last_error = error

    def end(self, reason: str, exit_code: int | None = None) -> None:
        """The job or its connection is gone; the first reason given is kept (a bye's reason beats a closed socket)."""
        with self._lock:
            self._end(reason)
            if exit_code is not None:
                self.exit_code = exit_code

    def _end(self, reason: str) -> None:
        if not self.ended:
            self.ended = True
            self.end_reason = reason
            self._close_bucket()
        self.connected = False

    def _take_steps(self, message: Mapping[str, Any]) -> None:
        dropped = message.get("dropped")
        if isinstance(dropped, int) and dropped > 0:
            self._dropped += dropped
        stats = message.get("stats")
        if isinstance(stats, Mapping):
            self._hook_stats = dict(stats)
        records = message.get("records")
        for record in records if isinstance(records, list) else ():
            if not isinstance(record, Mapping):
                continue
            step = StepPoint.from_record(record)
            if step is None or step.seq <= self._last_seq:
                continue  # a resent backlog: seen already
            if self._last_seq and step.seq > self._last_seq + 1:
                self._dropped += 0 if isinstance(dropped, int) and dropped > 0 else step.seq - self._last_seq - 1
            self._last_seq = step.seq
            self._steps.append(step)
            self._step_sums.add(step.t, step.wall_ms, step.data_ms, step.gpu_busy_ms, step.samples, step.budget)
            self._add_to_timeline(step)
            self._now = max(self._now, step.t)

    def _add_to_timeline(self, step: StepPoint) -> None:
        index = math.floor(step.t / BUCKET_S)
        bucket = self._bucket
        if bucket is None:
            if self._timeline:
                self._fill_gap(math.floor(self._timeline[-1].t / BUCKET_S) + 1, index)
            self._bucket = _Bucket(index)
        elif index > bucket.index:
            self._close_bucket()
            self._fill_gap(bucket.index + 1, index)
            self._bucket = _Bucket(index)
        assert self._bucket is not None
        self._bucket.steps.append(step)  # a late record of a closed second counts in the open one

    def _advance(self, t: float) -> None:
        """The hook's clock moved to `t`: close the seconds that ended (with grace for records still in flight)."""
        self._now = max(self._now, t)
        bucket = self._bucket
        if bucket is None:
            return
        closed_until = math.floor((t - LATE_GRACE_S) / BUCKET_S)
        if closed_until > bucket.index:
            self._close_bucket()
            self._fill_gap(bucket.index + 1, closed_until)
            self._bucket = _Bucket(closed_until)

    def _fill_gap(self, first: int, stop: int) -> None:
        """Seconds without any step: zero steps, no breakdown (at most a timeline's worth)."""
        for index in range(max(first, stop - TIMELINE_POINTS), stop):
            self._timeline.append(_Bucket(index).point())

    def _close_bucket(self) -> None:
        if self._bucket is not None:
            self._timeline.append(self._bucket.point())
            self._bucket = None

    # -- reading ---------------------------------------------------------------------------------

    @property
    def info(self) -> JobInfo | None:
        """The job as its hello describes it (None before the hello)."""
        return self._info

    def view(self) -> HookedView:
        """A frozen copy of what is known now, safe to read on any thread."""
        with self._lock:
            steps = tuple(self._steps)
            recent = steps[-RECENT_STEPS:]
            now = self._now
            silent = None if self._last_message is None else max(0.0, self._clock() - self._last_message)
            return HookedView(
                pid=self.pid,
                info=self._info,
                connected=self.connected,
                waiting=self.waiting,
                ended=self.ended,
                end_reason=self.end_reason,
                exit_code=self.exit_code,
                steps=recent,
                timeline=tuple(self._timeline),
                stats=RollingStats.of(steps[-2048:], now),
                hook_stats=dict(self._hook_stats),
                state=self._state,
                last_seq=self._last_seq,
                dropped=self._dropped,
                protocol_errors=self._protocol_errors,
                last_error=self._last_error,
                silent_s=silent,
                diagnosis=self._diagnosis,
                step_sums=self._step_sums.seconds(),
                host_profiles=tuple(self._host),
                gc_points=tuple(self._gc),
            )


def rank_summary(view: HookedView) -> RankSummary:
    """One rank's row of the per-rank table, from its view."""
    info = view.info
    stats = view.stats
    return RankSummary(
        rank=info.rank if info is not None else None,
        pid=view.pid,
        steps_per_s=stats.steps_per_s,
        wall_ms=stats.wall_ms,
        data_ms=stats.data_ms,
        gpu_ms=stats.gpu_ms,
        ended=view.ended,
        breakdown=stats.breakdown,
    )


def group_view(views: Sequence[HookedView], primary: int = 0) -> HookedView:
    """The primary rank's view with every rank's summary and the straggler, for a distributed job."""
    if not views:
        raise ValueError("no views")
    main = views[primary]
    if len(views) == 1:
        return main
    ranks = tuple(rank_summary(view) for view in views)
    return replace(
        main,
        ranks=ranks,
        straggler=find_straggler(ranks),
        ended=all(view.ended for view in views),
        end_reason=main.end_reason if all(view.ended for view in views) else None,
    )


def replay_messages(messages: Iterable[Mapping[str, Any]], pid: int | None = None) -> JobState:
    """A JobState fed from recorded messages (tests, and `--json` output read back)."""
    items = list(messages)
    if pid is None:
        pid = next((m["pid"] for m in items if m.get("type") == protocol.HELLO and isinstance(m.get("pid"), int)), 0)
    state = JobState(pid, clock=lambda: 0.0)
    for message in items:
        if message.get("type") == "ended":
            state.end(str(message.get("reason") or END_CLOSED), message.get("exit_code"))
        else:
            state.apply(message)
    return state
