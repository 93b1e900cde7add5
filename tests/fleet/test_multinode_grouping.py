"""Multi-node grouping: the ranks of one torchrun job are one job on every host (they share the run id and the
rendezvous address), and two jobs left on torchrun's default run id ('none') stay two jobs."""

from __future__ import annotations

from fleet_helpers import recorded_prometheus, vector

from gpumon.exporter.jobs import job_key
from gpumon.fleet import FleetSnapshot, PromClient, read_fleet
from gpumon.jobs.job_info import JobInfo, group_jobs

NOW = 1795436099.694


def rank_labels(host: str, pid: str, rank: str, key: str, job_label: str = "training_job") -> dict[str, str]:
    """A rank's labels as Prometheus stores them: the exporter's `training_job` beside the scrape job's `job`; older
    exporters' `job` label is stored renamed exported_job (kept as `job` when the scrape config says honor_labels)."""
    return {
        "host": host,
        "pid": pid,
        "rank": rank,
        "world_size": "2",
        "run_id": "none",
        "command": "python3 train.py",
        job_label: key,
        **({"job": "gpumon"} if job_label != "job" else {}),
    }


def read(*ranks: tuple[dict[str, str], float, float]) -> FleetSnapshot:
    answers = {
        "gpumon_job_step_seconds": vector(*((labels, step) for labels, step, _ in ranks)),
        "gpumon_job_data_wait_ratio": vector(*((labels, wait) for labels, _, wait in ranks)),
    }
    with recorded_prometheus(answers) as url:
        return read_fleet(PromClient(url), now=NOW)


def test_two_jobs_on_the_default_run_id_stay_apart_and_each_spans_its_hosts() -> None:
    first, second = "run:none@10.0.0.1:29500", "run:none@10.0.0.7:29500"
    snapshot = read(
        (rank_labels("node-a", "100", "0", first), 0.1, 0.02),
        (rank_labels("node-b", "100", "1", first), 0.1, 0.40),
        (rank_labels("node-c", "200", "0", second), 0.2, 0.01),
        (rank_labels("node-d", "300", "1", second), 0.2, 0.01),
    )
    jobs = {job.run_id: job for job in snapshot.jobs}
    assert set(jobs) == {first, second}
    assert [(rank.host, rank.rank) for rank in jobs[first].ranks] == [("node-a", 0), ("node-b", 1)]
    assert [(rank.host, rank.rank) for rank in jobs[second].ranks] == [("node-c", 0), ("node-d", 1)]
    assert jobs[first].straggler == 1  # rank 1 on node-b waits for its data
    assert jobs[second].straggler is None


def test_series_of_older_exporters_group_the_same() -> None:
    """Before `training_job`, the key was the exporter's `job` label: stored as exported_job, or as `job` with
    honor_labels. Series they left in Prometheus are still grouped by it."""
    key = "run:none@10.0.0.1:29500"
    renamed = read(
        (rank_labels("node-a", "100", "0", key, job_label="exported_job"), 0.1, 0.02),
        (rank_labels("node-b", "100", "1", key, job_label="exported_job"), 0.1, 0.02),
    )
    assert [(job.run_id, len(job.ranks)) for job in renamed.jobs] == [(key, 2)]
    snapshot = read(
        (rank_labels("node-a", "100", "0", key, job_label="job"), 0.1, 0.02),
        (rank_labels("node-b", "100", "1", key, job_label="job"), 0.1, 0.02),
    )
    assert [(job.run_id, len(job.ranks)) for job in snapshot.jobs] == [(key, 2)]


def test_single_process_jobs_with_the_same_pid_on_two_hosts_are_two_jobs() -> None:
    solo_a = {**rank_labels("node-a", "55", "", "pid:55"), "run_id": ""}
    solo_b = {**rank_labels("node-b", "55", "", "pid:55"), "run_id": ""}
    snapshot = read((solo_a, 0.1, 0.0), (solo_b, 0.1, 0.0))
    assert sorted(job.run_id for job in snapshot.jobs) == ["node-a:55", "node-b:55"]


def hooked(pid: int, rank: int, master_addr: str, run_id: str = "none") -> JobInfo:
    dist = {"rank": rank, "world_size": 2, "run_id": run_id, "master_addr": master_addr, "master_port": "29500"}
    return JobInfo.of(pid, f"/tmp/x/{pid}.sock", {"pid": pid, "argv": ["train.py"], "dist": dist})


def test_discovery_groups_by_run_id_and_rendezvous_address() -> None:
    groups = group_jobs([hooked(11, 0, "10.0.0.1"), hooked(12, 1, "10.0.0.1"), hooked(13, 1, "10.0.0.7")])
    assert [group.pids for group in groups] == [[11, 12], [13]]
    assert groups[0].key == ("run_id", "none", "10.0.0.1", "29500")
    assert groups[0].label.startswith("torchrun run none: ranks 0,1 of 2 (pids 11, 12)")


def test_exporter_job_label_is_the_same_on_every_node() -> None:
    assert job_key(hooked(11, 0, "10.0.0.1"), 11) == job_key(hooked(99, 1, "10.0.0.1"), 99) == "run:none@10.0.0.1:29500"
    assert job_key(hooked(13, 1, "10.0.0.7"), 13) == "run:none@10.0.0.7:29500"
    no_address = JobInfo.of(5, "", {"pid": 5, "dist": {"world_size": 2, "run_id": "r"}})
    assert job_key(no_address, 5) == "run:r"
    assert job_key(None, 5) == "pid:5"
