"""read_fleet: Prometheus's answers become one FleetSnapshot per host and GPU, and per job across hosts."""

from __future__ import annotations

import threading

import pytest
from fleet_helpers import RANGE, closed_port_url, recorded, recorded_prometheus, vector

from gpumon.fleet import FleetPoller, FleetSnapshot, PromClient, read_fleet
from gpumon.fleet.snapshot import EMPTY_ANSWER, GPU_QUERIES, HISTORY_POINTS

NOW = 1795436099.694
"""The recorded answers' time."""
GIB = 1 << 30


def rank(host: str, pid: str, rank: str | None = None, run_id: str = "") -> dict[str, str]:
    labels = {"host": host, "pid": pid, "command": "python3 train.py", "run_id": run_id}
    return labels if rank is None else {**labels, "rank": rank, "world_size": "2"}


def gpu(host: str) -> dict[str, str]:
    return {"host": host, "gpu": "0"}


def fleet_answers(step_b: float = 0.2, wait_a: float = 0.05, wait_b: float = 0.05) -> dict[str, bytes]:
    """Two hosts; a torchrun job with rank 0 on sim-node-a and rank 1 on sim-node-b (the same pid on both), and a
    single-process job on sim-node-a."""
    a0, b1, solo = (
        rank("sim-node-a", "100", "0", "run-7"),
        rank("sim-node-b", "100", "1", "run-7"),
        rank("sim-node-a", "555"),
    )
    return {
        "gpumon_gpu_utilization_ratio": recorded("query-utilization.json"),
        "gpumon_gpu_sm_active_ratio": vector((gpu("sim-node-a"), 0.31), (gpu("sim-node-b"), 0.12)),
        "gpumon_gpu_memory_used_bytes": vector((gpu("sim-node-a"), 20 * GIB), (gpu("sim-node-b"), 8 * GIB)),
        GPU_QUERIES["memory_total"]: vector((gpu("sim-node-a"), 80 * GIB), (gpu("sim-node-b"), 80 * GIB)),
        RANGE + "gpumon_gpu_utilization_ratio": recorded("query_range-utilization.json"),
        "gpumon_job_step_seconds": vector((a0, 0.1), (b1, step_b), (solo, 0.05)),
        "gpumon_job_data_wait_ratio": vector((a0, wait_a), (b1, wait_b), (solo, 0.0)),
        "gpumon_job_finding": vector(({**a0, "category": "healthy"}, 0.3), ({**b1, "category": "input_bound"}, 0.8)),
    }


def read(answers: dict[str, bytes]) -> FleetSnapshot:
    with recorded_prometheus(answers) as url:
        return read_fleet(PromClient(url), now=NOW)


def test_both_hosts_with_their_values_and_history() -> None:
    snapshot = read(fleet_answers())
    assert snapshot.error is None
    assert snapshot.hosts == ("sim-node-a", "sim-node-b")
    rows = {row.host: row for row in snapshot.gpus}
    assert rows["sim-node-a"].utilization == pytest.approx(44.0)
    assert rows["sim-node-b"].utilization == pytest.approx(25.0)
    assert rows["sim-node-a"].sm_active == pytest.approx(31.0)
    assert rows["sim-node-b"].memory_used == 8 * GIB and rows["sim-node-b"].memory_total == 80 * GIB
    history = rows["sim-node-a"].utilization_history
    assert len(history) == HISTORY_POINTS + 1  # the fixed grid from NOW - HISTORY_SECONDS to NOW
    assert history[-1] == pytest.approx(44.0) and history[0] is None
    assert rows["sim-node-b"].utilization_history[-1] == pytest.approx(25.0)
    assert rows["sim-node-a"].sm_history == ()  # no SM range recorded: no graph, not made-up zeros


def test_job_grouped_across_hosts_with_straggler_on_the_other_node() -> None:
    snapshot = read(fleet_answers(step_b=0.2))
    jobs = {job.run_id: job for job in snapshot.jobs}
    assert set(jobs) == {"run-7", "sim-node-a:555"}
    job = jobs["run-7"]
    assert [(r.rank, r.host) for r in job.ranks] == [(0, "sim-node-a"), (1, "sim-node-b")]
    assert job.ranks[0].step_ms == pytest.approx(100.0) and job.ranks[1].step_ms == pytest.approx(200.0)
    assert job.straggler == 1
    assert (job.finding, job.confidence) == ("input_bound", 0.8)
    assert jobs["sim-node-a:555"].straggler is None and jobs["sim-node-a:555"].finding is None


def test_lockstep_ranks_name_the_one_waiting_for_data() -> None:
    job = {j.run_id: j for j in read(fleet_answers(step_b=0.1, wait_a=0.40, wait_b=0.05)).jobs}["run-7"]
    assert job.straggler == 0
    assert job.ranks[0].data_wait == pytest.approx(40.0)


def test_no_straggler_when_ranks_agree() -> None:
    job = {j.run_id: j for j in read(fleet_answers(step_b=0.101)).jobs}["run-7"]
    assert job.straggler is None


def test_empty_answer_is_one_line() -> None:
    snapshot = read({})
    assert snapshot.error == EMPTY_ANSWER and snapshot.gpus == ()


def test_lost_prometheus_is_one_line_not_an_exception() -> None:
    url = closed_port_url()
    snapshot = read_fleet(PromClient(url, timeout=2.0), now=NOW)
    assert snapshot.error == f"Prometheus at {url} unreachable: Connection refused"
    assert snapshot.gpus == () and snapshot.jobs == ()


def test_poller_delivers_snapshots_from_its_own_thread() -> None:
    got: list[tuple[FleetSnapshot, str]] = []
    arrived = threading.Event()

    def on_snapshot(snapshot: FleetSnapshot) -> None:
        got.append((snapshot, threading.current_thread().name))
        if len(got) >= 2:
            arrived.set()

    with recorded_prometheus(fleet_answers()) as url:
        poller = FleetPoller(PromClient(url, timeout=2.0), 0.05, on_snapshot)
        poller.start()
        try:
            assert arrived.wait(20), "two snapshots within 20 s"
        finally:
            poller.stop()
    assert all(name == "gpumon-fleet-poller" for _, name in got)
    assert got[0][0].hosts == ("sim-node-a", "sim-node-b")
    count = len(got)
    assert not poller._thread.is_alive() and len(got) == count


def test_a_deeply_nested_answer_is_one_line_and_the_poller_goes_on() -> None:
    """One answer nested deeper than json's recursion killed the poller thread (RecursionError):
    the view said "reading ..." forever, even once Prometheus answered well again."""
    answers = fleet_answers()
    good = answers["gpumon_gpu_utilization_ratio"]
    answers["gpumon_gpu_utilization_ratio"] = b"[" * 200_000 + b"]" * 200_000
    got: list[FleetSnapshot] = []
    recovered = threading.Event()

    def on_snapshot(snapshot: FleetSnapshot) -> None:
        got.append(snapshot)
        if snapshot.error is not None:
            answers["gpumon_gpu_utilization_ratio"] = good  # Prometheus answers well again
        elif snapshot.hosts:
            recovered.set()

    with recorded_prometheus(answers) as url:
        poller = FleetPoller(PromClient(url, timeout=2.0), 0.05, on_snapshot)
        poller.start()
        try:
            assert recovered.wait(20), f"no good snapshot after the nested one within 20 s: {got}"
        finally:
            poller.stop()
    first = got[0].error
    assert first is not None and "not JSON" in first and "\n" not in first
    assert got[-1].hosts == ("sim-node-a", "sim-node-b")
