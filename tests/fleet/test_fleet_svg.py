"""The fleet view as SVG screenshots: at 160x50, two hosts' GPUs and one 2-node torchrun job grouped across them; at
80x24 and 160x50, 50 hosts of 8 GPUs with a DOWN host, an NVML failure, a GPU off the bus, an XID and throttling;
at 160x50, everything a real Prometheus answered about a 2-node NCCL torchrun on 2x H200 (one GPU a node).

The job's answers are Prometheus's own, recorded from tests/exporter/test_multinode_torchrun.py (a real 2-node
torchrun on loopback; rank 1, on sim-node-b, waits for its data); the GPU rows are the recorded answers the other
fleet tests use. Regenerate after an intended change: python -m pytest tests/fleet/test_fleet_svg.py --snapshot-update
"""

from __future__ import annotations

import json

from fleet_helpers import RANGE, RECORDED, many_hosts, recorded, recorded_prometheus, vector
from textual.pilot import Pilot

from gpumon.fleet import FleetSnapshot, PromClient, read_fleet
from gpumon.fleet.snapshot import GPU_QUERIES
from gpumon.tui.fleet_app import FleetApp

NOW = 1795436099.694
"""The recorded GPU answers' time."""
GIB = 1 << 30


def two_node_fleet() -> FleetSnapshot:
    gpu_a, gpu_b = {"host": "sim-node-a", "gpu": "0"}, {"host": "sim-node-b", "gpu": "0"}
    answers = {
        "gpumon_gpu_utilization_ratio": recorded("query-utilization.json"),
        "gpumon_gpu_sm_active_ratio": vector((gpu_a, 0.31), (gpu_b, 0.12)),
        "gpumon_gpu_memory_used_bytes": vector((gpu_a, 20 * GIB), (gpu_b, 8 * GIB)),
        GPU_QUERIES["memory_total"]: vector((gpu_a, 80 * GIB), (gpu_b, 80 * GIB)),
        RANGE + "gpumon_gpu_utilization_ratio": recorded("query_range-utilization.json"),
        "gpumon_job_step_seconds": recorded("query-2node-job-step.json"),
        "gpumon_job_data_wait_ratio": recorded("query-2node-job-data_wait.json"),
        "gpumon_job_finding": recorded("query-2node-job-finding.json"),
    }
    with recorded_prometheus(answers) as url:
        return read_fleet(PromClient(url), now=NOW)


def test_recorded_two_node_job_is_one_job_with_its_straggler_on_the_other_node() -> None:
    snapshot = two_node_fleet()
    (job,) = snapshot.jobs
    assert job.run_id.startswith("run:none@127.0.0.1:")
    assert [(rank.host, rank.rank) for rank in job.ranks] == [("sim-node-a", 0), ("sim-node-b", 1)]
    assert job.straggler == 1


def test_fleet_view_160x50(snap_compare, utc_time_zone: None) -> None:
    snapshot = two_node_fleet()
    app = FleetApp()

    async def run_before(pilot: Pilot) -> None:
        app.show(snapshot)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 50), run_before=run_before)


def test_fifty_hosts_80x24(snap_compare, utc_time_zone: None) -> None:
    app = FleetApp()

    async def run_before(pilot: Pilot) -> None:
        app.show(many_hosts())
        await pilot.pause()

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_fifty_hosts_by_state_160x50(snap_compare, utc_time_zone: None) -> None:
    app = FleetApp(sort="state")

    async def run_before(pilot: Pilot) -> None:
        app.show(many_hosts())
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 50), run_before=run_before)


H200X2_NCCL = RECORDED / "h200x2-nccl"
"""Recorded on 2x H200 (nvidia-h200-x2), 2026-11-27, by tests/exporter/test_multinode_torchrun.py[nccl] with
GPUMON_RECORD_PROMETHEUS set: every answer the fleet read from a real Prometheus 2.42 scraping two exporters (one per
simulated node, `--only` its GPU) while rank 1 waited 30 ms for each batch; and each exporter's scrape then."""


def h200x2_fleet() -> FleetSnapshot:
    record = json.loads((H200X2_NCCL / "fleet-answers.json").read_text())
    answers = {query: body.encode() for query, body in record["answers"].items()}
    with recorded_prometheus(answers) as url:
        return read_fleet(PromClient(url), now=record["now"])


def test_real_two_node_nccl_job_on_h200s() -> None:
    snapshot = h200x2_fleet()
    assert snapshot.error is None
    assert [(gpu.host, gpu.gpu) for gpu in snapshot.gpus] == [("sim-node-a", "0"), ("sim-node-b", "1")]
    assert all(gpu.memory_total and gpu.memory_total > 100 * GIB for gpu in snapshot.gpus)  # H200: 141 GiB
    (job,) = snapshot.jobs
    assert [(rank.host, rank.rank) for rank in job.ranks] == [("sim-node-a", 0), ("sim-node-b", 1)]
    assert job.straggler == 1  # the rank that waits for its data


def test_real_two_node_nccl_job_160x50(snap_compare, utc_time_zone: None) -> None:
    snapshot = h200x2_fleet()
    app = FleetApp()

    async def run_before(pilot: Pilot) -> None:
        app.show(snapshot)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 50), run_before=run_before)
