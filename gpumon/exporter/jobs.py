"""Hooked jobs as metrics: found and followed through gpumon.jobs, each rank's step figures and the advisor's
finding worked out on the exporter's jobs thread; a scrape only reads the last results.

Per rank (one hooked process): gpumon_job_step_seconds, gpumon_job_data_wait_ratio, gpumon_job_gpu_ratio,
gpumon_job_steps_per_second, gpumon_job_samples_per_second, gpumon_job_syncs_per_step,
gpumon_job_dataloader_workers, gpumon_job_peak_memory_bytes, gpumon_job_mfu_ratio,
gpumon_job_energy_per_sample_joules, gpumon_job_steps_total, gpumon_job_step_share_ratio{owner} (the step model's split
of the step time, 0-1, adding up to 1 over the owners), and gpumon_job_finding{category} (its confidence, 0-1) with
gpumon_job_finding_severity{category}. Labels: host, pid,
command, training_job (what the job's ranks on every node share: job_key; never `job`, which is Prometheus'
scrape job), run_id, rank,
local_rank, world_size, and the process's container, pod and Slurm job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpumon.advisor.efficiency import job_mfu, joules_per_sample, snapshot_power
from gpumon.advisor.rules import Finding, diagnose
from gpumon.advisor.signals import Signals, build_signals, steps_in_window
from gpumon.exporter.labels import PLACEMENT_LABELS, PlacementCache, label_value, short_command
from gpumon.jobs import HookedView, JobClient, JobInfo, scan
from gpumon.jobs.step_model import OWNERS
from gpumon.sampling.snapshot import Snapshot

log = logging.getLogger(__name__)

MAX_JOBS = 64
"""Hooked processes followed at once (each costs a reader thread); more are left out until some end."""
DISCOVERY_INTERVAL = 10.0
"""Seconds between looks for new hooked jobs."""
UPDATE_INTERVAL = 5.0
"""Seconds between working out each rank's figures and finding."""
WINDOW_S = 30.0
"""The window the figures and the finding cover."""
SNAPSHOTS_KEPT = 600
"""Snapshots kept for the window (at the fastest interval, 0.1 s, a minute; at the default 5 s, 50 minutes)."""
JOB_LABELS = ("host", "pid", "command", "training_job", "run_id", "rank", "local_rank", "world_size")
"""Placement labels (container, pod, Slurm job) follow; run_id .. world_size come from the hook's hello."""
LABELS = (*JOB_LABELS, *(name for name in PLACEMENT_LABELS if name not in JOB_LABELS))
_FROM_PLACEMENT = tuple(name for name in PLACEMENT_LABELS if name not in JOB_LABELS)

TrackPids = Callable[[Iterable[int]], None]


@dataclass(frozen=True, slots=True)
class RankFigures:
    """What one rank exports, worked out on the jobs thread."""

    labels: tuple[str, ...]
    """LABELS' values, without the host (the collector's)."""
    signals: Signals
    syncs_per_step: float | None
    peak_memory: float | None
    steps_total: int
    finding: Finding | None
    mfu: float | None = None
    joules_per_sample: float | None = None


def job_key(info: JobInfo | None, pid: int) -> str:
    """What the ranks of one job share on every node, as one label value: 'run:ID@ADDR:PORT' (torchrun's run id
    and rendezvous address; 'run:ID' when the address is unknown), 'rdzv:ADDR:PORT', else 'pid:PID'."""
    key = info.group_key if info is not None else None
    if key is not None and key[0] == "run_id":
        rendezvous = ":".join(part for part in key[2:] if part)
        return label_value(f"run:{key[1]}@{rendezvous}" if rendezvous else f"run:{key[1]}")
    if key is not None and key[0] == "master":
        return label_value(f"rdzv:{key[1]}:{key[2]}")
    return f"pid:{pid}"


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


class JobMetrics:
    """Follows every hooked job this user may see (root: every user's) on its own thread.

    `on_snapshot` is fed by the sampling source; `track` (the Sampler's track_pids) makes the sampler follow the
    jobs' processes even when they hold no GPU, so their CPU and workers are in the snapshots.
    """

    def __init__(
        self,
        *,
        full_command: bool = False,
        track: TrackPids | None = None,
        placements: PlacementCache | None = None,
        discovery_interval: float = DISCOVERY_INTERVAL,
        update_interval: float = UPDATE_INTERVAL,
        window_s: float = WINDOW_S,
    ) -> None:
        self.full_command = full_command
        self.track = track
        self.placements = placements if placements is not None else PlacementCache()
        self.discovery_interval = discovery_interval
        self.update_interval = update_interval
        self.window_s = window_s
        self.figures: tuple[RankFigures, ...] = ()
        """Replaced whole by the jobs thread; a scrape reads it without a lock."""
        self._snapshots: deque[Snapshot] = deque(maxlen=SNAPSHOTS_KEPT)
        self._snapshots_lock = threading.Lock()
        self._clients: dict[int, JobClient] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_snapshot(self, snapshot: Snapshot) -> None:
        with self._snapshots_lock:
            self._snapshots.append(snapshot)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpumon-exporter-jobs", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for client in list(self._clients.values()):
            client.stop()
        self._clients.clear()

    # ---- the jobs thread -----------------------------------------------------------------------

    def _run(self) -> None:
        next_discovery = 0.0
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_discovery:
                    self.discover()
                    next_discovery = time.monotonic() + self.discovery_interval
                self.update()
            except Exception:  # the jobs thread never dies: one bad job or scan must not end the exporting
                log.exception("exporter jobs tick failed")
            self._stop.wait(self.update_interval)

    def discover(self) -> None:
        """Follow new hooked jobs, forget ended ones, and have the sampler track their processes."""
        for pid, client in list(self._clients.items()):
            if client.ended:
                client.stop()
                del self._clients[pid]
        found = scan(clean=False)
        for info in found.jobs:
            if len(self._clients) >= MAX_JOBS:
                break
            if info.pid in self._clients or not info.compatible:
                continue
            client = JobClient(info)
            client.start()
            self._clients[info.pid] = client
        if self.track is not None:
            self.track(sorted(self._clients))

    def update(self, now: float | None = None) -> None:
        """Work out every followed rank's figures and finding over the last window."""
        end = time.time() if now is None else now
        start = end - self.window_s
        with self._snapshots_lock:
            snapshots = [s for s in self._snapshots if start <= s.timestamp <= end]
        figures = []
        for client in list(self._clients.values()):
            view = client.view()
            if view.ended:
                continue
            figures.append(self._figures(view, snapshots, start, end))
        self.figures = tuple(figures)

    def _figures(self, view: HookedView, snapshots: list[Snapshot], start: float, end: float) -> RankFigures:
        signals = build_signals(snapshots, view, start=start, end=end)
        finding = diagnose(signals) if signals.step.steps else None
        syncs = signals.step.syncs_per_step
        if syncs is None:
            counted = [step.syncs for step in steps_in_window(view.steps, start, end) if step.syncs is not None]
            syncs = sum(counted) / len(counted) if counted else None
        info = view.info
        dist = info.dist if info is not None else {}
        placement = self.placements.of(view.pid)
        command = view.command if self.full_command else short_command(view.command)
        labels = (
            str(view.pid),
            label_value(command) if self.full_command else command,
            job_key(info, view.pid),
            label_value(dist.get("run_id") or ""),
            _text(info.rank if info else None),
            _text(info.local_rank if info else None),
            _text(info.world_size if info else None),
            *(getattr(placement, name) for name in _FROM_PLACEMENT),
        )
        peak = signals.memory.peak_memory
        power = snapshot_power(snapshots, [gpu.index for gpu in signals.gpu.gpus]) if signals.gpu.gpus else None
        return RankFigures(
            labels=labels,
            signals=signals,
            syncs_per_step=syncs,
            peak_memory=None if peak is None else float(peak),
            steps_total=view.last_seq,
            finding=finding,
            mfu=job_mfu(view, signals.step.steps_per_s).value if signals.step.steps_per_s else None,
            joules_per_sample=joules_per_sample(power, signals.step.samples_per_s),
        )

    # ---- the scrape ----------------------------------------------------------------------------

    def families(self, host: str) -> Iterator[Metric]:
        figures = self.figures
        gauges: list[tuple[str, str, Callable[[RankFigures], float | None]]] = [
            ("gpumon_job_step_seconds", "Mean step time over the window.", lambda f: _ms(f.signals.step.step_ms)),
            (
                "gpumon_job_data_wait_ratio",
                "Share of each step spent waiting for the next batch, 0-1.",
                lambda f: f.signals.step.data_share,
            ),
            (
                "gpumon_job_gpu_ratio",
                "Share of each step covered by GPU work (CUDA events), 0-1.",
                lambda f: f.signals.step.gpu_share,
            ),
            ("gpumon_job_steps_per_second", "Training steps a second.", lambda f: f.signals.step.steps_per_s),
            (
                "gpumon_job_samples_per_second",
                "Samples a second, where the batch size is known.",
                lambda f: f.signals.step.samples_per_s,
            ),
            (
                "gpumon_job_syncs_per_step",
                "Host-device synchronizations per step, where counted.",
                lambda f: f.syncs_per_step,
            ),
            (
                "gpumon_job_dataloader_workers",
                "DataLoader worker processes configured.",
                lambda f: f.signals.loader.num_workers,
            ),
            (
                "gpumon_job_peak_memory_bytes",
                "Peak CUDA memory allocated (torch.cuda.max_memory_allocated).",
                lambda f: f.peak_memory,
            ),
            (
                "gpumon_job_mfu_ratio",
                "Model FLOPs utilization: FLOPs per step x steps/s over the GPU's spec-sheet dense peak, 0-1.",
                lambda f: f.mfu,
            ),
            (
                "gpumon_job_energy_per_sample_joules",
                "Energy of the rank's GPUs (NVML's energy counter) per sample trained.",
                lambda f: f.joules_per_sample,
            ),
        ]
        for name, help_text, read in gauges:
            family = GaugeMetricFamily(name, help_text, labels=LABELS)
            for rank in figures:
                value = read(rank)
                if value is not None:
                    family.add_metric((host, *rank.labels), float(value))
            yield family
        steps = CounterMetricFamily("gpumon_job_steps", "Training steps the hook has reported.", labels=LABELS)
        finding = GaugeMetricFamily(
            "gpumon_job_finding",
            "The advisor's finding for the window (its category); the value is its confidence, 0-1.",
            labels=(*LABELS, "category"),
        )
        severity = GaugeMetricFamily(
            "gpumon_job_finding_severity", "The share of time the finding costs, 0-1.", labels=(*LABELS, "category")
        )
        step_share = GaugeMetricFamily(
            "gpumon_job_step_share_ratio",
            "The step model's share of the step time owned by `owner` (GPU busy, or what the GPU waited on), 0-1; "
            "the owners add up to 1.",
            labels=(*LABELS, "owner"),
        )
        for rank in figures:
            steps.add_metric((host, *rank.labels), float(rank.steps_total))
            for owner in OWNERS:
                share = rank.signals.step_model.step_shares.get(owner)
                if share is not None:
                    step_share.add_metric((host, *rank.labels, owner), float(share))
            if rank.finding is not None:
                key = (host, *rank.labels, rank.finding.category)
                finding.add_metric(key, rank.finding.confidence)
                severity.add_metric(key, rank.finding.severity)
        yield from (steps, step_share, finding, severity)


def _ms(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000
