"""`gpumon fleet`'s CPU per refresh with 50 hosts x 8 GPUs, read from a real Prometheus.

Usage (from the project root; needs the `prometheus` binary, no GPU):

    python benchmarks/fleet_refresh.py
    python benchmarks/fleet_refresh.py --hosts 50 --gpus 8 --warmup 320 --rounds 20 --json fleet_refresh.json

50 simulated exporters (tests/fleet/synthetic_exporters.py: the real SnapshotCollector on a real H200 recording,
its GPU copied to 8, in a child process) are scraped by a real Prometheus every --scrape-interval seconds. After
--warmup seconds (past the fleet's 300 s graph window, so every history query returns full series), this process
measures, each with its own CPU time (time.process_time: every thread of this process, not the exporters' or
Prometheus's):

- read: read_fleet() --rounds times (every PromQL query of one refresh, the JSON parsed into a FleetSnapshot);
- view: the Textual fleet app (headless, 160x50 and 80x24) showing --rounds snapshots in turn: filter, sort,
  layout and every row drawn, waited until drawn;
- refresh: the two together: what one refresh of `gpumon fleet` costs. Target: at most 1 s of CPU per refresh.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "fleet"))

from fleet_prometheus import has_prometheus, scraping_prometheus

from gpumon.fleet import FleetSnapshot, PromClient, read_fleet
from gpumon.tui.fleet_app import FleetApp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--scrape-interval", type=int, default=5, help="seconds (default 5)")
    parser.add_argument("--warmup", type=float, default=320.0, help="seconds of history before measuring")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    if not has_prometheus():
        print("fleet_refresh: no prometheus binary (apt-get install prometheus)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        ports_file = tmp / "ports"
        exporters = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/fleet/synthetic_exporters.py"), "--hosts", str(args.hosts),
             "--gpus", str(args.gpus), "--ports-file", str(ports_file)],
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not (ports_file.exists() and len(ports_file.read_text().split()) == args.hosts):
                if time.monotonic() > deadline or exporters.poll() is not None:
                    raise SystemExit("fleet_refresh: the simulated exporters did not start")
                time.sleep(0.2)
            targets = [f"127.0.0.1:{port}" for port in ports_file.read_text().split()]
            with scraping_prometheus(tmp, targets, interval=f"{args.scrape_interval}s") as url:
                print(f"Prometheus {url} scrapes {len(targets)} exporters; {args.warmup:g} s of history first ...")
                time.sleep(args.warmup)
                figures = measure(PromClient(url, timeout=30.0), args.rounds)
        finally:
            exporters.terminate()
            exporters.wait(timeout=15)
    figures.update(
        hosts=args.hosts,
        gpus_per_host=args.gpus,
        scrape_interval_s=args.scrape_interval,
        warmup_s=args.warmup,
        date=datetime.date.today().isoformat(),
        python=platform.python_version(),
        machine=platform.machine(),
    )
    print(json.dumps(figures, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def measure(client: PromClient, rounds: int) -> dict[str, Any]:
    read_cpu, read_wall, snapshots = [], [], []
    read_fleet(client)  # the first round pays for imports and connections
    for _ in range(rounds):
        cpu, wall = time.process_time(), time.monotonic()
        snapshot = read_fleet(client)
        read_cpu.append(time.process_time() - cpu)
        read_wall.append(time.monotonic() - wall)
        if snapshot.error is not None:
            raise SystemExit(f"fleet_refresh: {snapshot.error}")
        snapshots.append(snapshot)
    last = snapshots[-1]
    history_points = sum(sum(value is not None for value in row.utilization_history) for row in last.gpus)
    view = {f"{w}x{h}": asyncio.run(view_cost(snapshots, (w, h))) for w, h in ((160, 50), (80, 24))}
    worst_view = max(statistics.median(costs) for costs in view.values())
    return {
        "gpu_rows": len(last.gpus),
        "hosts_seen": len(last.hosts),
        "history_points_per_gpu": history_points / max(1, len(last.gpus)),
        "read_cpu_s": summary(read_cpu),
        "read_wall_s": summary(read_wall),
        "view_cpu_s": {size: summary(costs) for size, costs in view.items()},
        "refresh_cpu_s_median": statistics.median(read_cpu) + worst_view,
        "refresh_cpu_s_max": max(read_cpu) + max(max(costs) for costs in view.values()),
    }


async def view_cost(snapshots: list[FleetSnapshot], size: tuple[int, int]) -> list[float]:
    """CPU of show() and the frame it causes, per snapshot (the app's idle time between them is not counted)."""
    app = FleetApp()
    costs = []
    async with app.run_test(size=size) as pilot:
        app.show(snapshots[0])
        await pilot.pause()
        for snapshot in snapshots:
            cpu = time.process_time()
            app.show(snapshot)
            await pilot.pause()  # until the screen is drawn
            costs.append(time.process_time() - cpu)
    return costs


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
        "min": round(min(values), 4),
        "n": len(values),
    }


if __name__ == "__main__":
    raise SystemExit(main())
