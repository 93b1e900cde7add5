"""How many series `gpumon exporter` serves for one busy 8-GPU node, by default and with --per-worker-series.

Usage (from the project root; no GPU needed):

    python benchmarks/exporter_series.py
    python benchmarks/exporter_series.py --jobs 4 --workers-per-job 8 --restarts 10 --json exporter_series.json

The node: the 8 GPUs of benchmarks/exporter_scrape.py (every field set), --jobs hooked training jobs sharing them
(one rank per GPU), each job's ranks with --workers-per-job DataLoader workers between them, every rank with its
step figures, all 9 step-model owners and a finding. The real SnapshotCollector and JobMetrics families are
scraped (prometheus_client's exposition text, parsed back) and each sample line counted as one series.

Churn: DataLoader workers without persistent_workers are new processes (new pids) every epoch. --restarts epochs
are scraped one after another, each with new worker pids, and the distinct series over all of them counted: what
Prometheus holds in its head block after that many epochs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter_scrape import GIB, GPUS, synthetic_snapshot
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals
from gpumon.exporter.collector import SnapshotCollector
from gpumon.exporter.jobs import JobMetrics, RankFigures
from gpumon.exporter.labels import PlacementCache
from gpumon.jobs.step_model import OWNERS
from gpumon.sampling.snapshot import ProcessSample, Snapshot

RANK_PID = 20_000
WORKER_PID = 30_000


def node_snapshot(jobs: int, workers_per_job: int, epoch: int) -> Snapshot:
    """The 8 GPUs with one rank each, `jobs` jobs over them; the workers' pids new at every epoch."""
    ranks_per_job = GPUS // jobs
    workers_per_rank = workers_per_job // ranks_per_job
    ranks = []
    for gpu in range(GPUS):
        first_worker = WORKER_PID + (epoch * GPUS + gpu) * workers_per_rank
        workers = tuple(
            ProcessSample(
                pid=first_worker + n, ppid=RANK_PID + gpu, command="python3 train.py", cpu_percent=80.0, rss=2 * GIB
            )
            for n in range(workers_per_rank)
        )
        ranks.append(
            ProcessSample(
                pid=RANK_PID + gpu,
                command=f"python3 job{gpu // ranks_per_job}.py",
                gpu_indices=(gpu,),
                gpu_memory=40 * GIB,
                sm_percent=60.0,
                cpu_percent=100.0,
                rss=8 * GIB,
                children=workers,
            )
        )
    return replace(synthetic_snapshot(1.0e9 + epoch, epoch), processes=tuple(ranks))


def rank_figures(jobs: int) -> tuple[RankFigures, ...]:
    """Every rank with every job family set: step figures, the 9 step-model shares and a finding."""
    ranks_per_job = GPUS // jobs
    signals = Signals.of(
        step_ms=100.0,
        data_share=0.3,
        gpu_share=0.6,
        steps_per_s=10.0,
        samples_per_s=320.0,
        syncs_per_step=1.0,
        num_workers=4,
        peak_memory=40 * GIB,
        step_shares={owner: 1 / len(OWNERS) for owner in OWNERS},
    )
    figures = []
    for gpu in range(GPUS):
        job = gpu // ranks_per_job
        rank = gpu % ranks_per_job
        labels = (
            str(RANK_PID + gpu),
            f"python3 job{job}.py",
            f"run:none@10.0.0.{job}:29500",
            "none",
            str(rank),
            str(rank),
            str(ranks_per_job),
            "",
            "",
            "",
            "",
            "",
        )
        figures.append(
            RankFigures(
                labels=labels,
                signals=signals,
                syncs_per_step=1.0,
                peak_memory=40.0 * GIB,
                steps_total=1000,
                finding=Finding(category="input_bound", evidence="", confidence=0.8, severity=0.3),
                mfu=0.4,
                joules_per_sample=2.0,
            )
        )
    return tuple(figures)


def series(collector: SnapshotCollector) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def measure(jobs: int, workers_per_job: int, restarts: int, per_worker: bool) -> dict[str, Any]:
    job_metrics = JobMetrics()
    job_metrics.figures = rank_figures(jobs)
    collector = SnapshotCollector(
        "bench-node", per_worker_series=per_worker, placements=PlacementCache(enabled=False), extra=job_metrics
    )
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    first = 0
    for epoch in range(restarts + 1):
        collector.on_snapshot(node_snapshot(jobs, workers_per_job, epoch))
        scraped = series(collector)
        first = first or len(scraped)
        seen |= scraped
    by_kind: dict[str, int] = {}
    for name, _ in seen:
        kind = name.split("_")[1]  # gpu, process, job, host, exporter, snapshot
        by_kind[kind] = by_kind.get(kind, 0) + 1
    return {"per_worker_series": per_worker, "one_scrape": first, "after_restarts": len(seen), "by_kind": by_kind}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=4, help="training jobs on the node's 8 GPUs (a divisor of 8)")
    parser.add_argument("--workers-per-job", type=int, default=8, help="DataLoader workers of each job")
    parser.add_argument("--restarts", type=int, default=10, help="epochs whose workers are new processes")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.jobs < 1 or GPUS % args.jobs or args.workers_per_job % (GPUS // args.jobs):
        parser.error(f"--jobs must divide {GPUS} and --workers-per-job must split evenly over each job's ranks")
    results = [measure(args.jobs, args.workers_per_job, args.restarts, per_worker) for per_worker in (False, True)]
    print(
        f"8 GPUs, {args.jobs} jobs x {args.workers_per_job} DataLoader workers ({GPUS} ranks, "
        f"{args.jobs * args.workers_per_job} workers); {args.restarts} worker restarts"
    )
    for result in results:
        mode = "--per-worker-series" if result["per_worker_series"] else "default"
        kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(result["by_kind"].items()))
        print(
            f"  {mode:20} one scrape: {result['one_scrape']:5} series; after the restarts: "
            f"{result['after_restarts']:5} ({kinds})"
        )
    if args.json is not None:
        meta = {"date": datetime.date.today().isoformat(), "python": platform.python_version(), "argv": sys.argv}
        args.json.write_text(
            json.dumps({"meta": meta, "args": vars(args) | {"json": str(args.json)}, "results": results}, indent=1)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
