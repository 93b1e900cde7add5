"""Hooked jobs in the exporter: a real `gpumon exporter` (live sampler) finds a real hooked CPU training job that
waits on its data, and exports its step figures, rank labels and the advisor's input_bound finding."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from exporter_helpers import REPO, only, running_exporter, samples, scrape, wait_until

from gpumon import protocol
from tests.attach.attach_helpers import HOOKED_JOB, Job

RANK_ENV = {
    "TORCHELASTIC_RUN_ID": "run\x1b42",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "SLURM_JOB_ID": "4242",
}


@pytest.fixture
def sock_dir() -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gpumon-exporter-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    yield directory
    shutil.rmtree(base, ignore_errors=True)


def test_a_hooked_job_waiting_on_data_is_exported_input_bound(sock_dir: str) -> None:
    job = Job(HOOKED_JOB, ["--seconds", "120", "--item-sleep-ms", "6", "--batch", "8"], sock_dir, env=RANK_ENV)
    try:
        job.event("ready")
        env = {protocol.SOCKET_DIR_ENV: sock_dir, "PYTHONPATH": str(REPO)}
        with running_exporter("--interval", "1", "--host-label", "node-j", env=env) as exporter:

            def job_found() -> bool:
                found = samples(scrape(exporter.url))
                return "gpumon_job_finding" in found and bool(found.get("gpumon_job_data_wait_ratio"))

            wait_until(job_found, 60, "the hooked job's figures and finding exported", interval=0.5)
            found = samples(scrape(exporter.url))
        labels, data_wait = only(found["gpumon_job_data_wait_ratio"])
        assert labels["pid"] == str(job.pid) and labels["host"] == "node-j"
        assert labels["command"] == "hooked_train.py"  # the hook's argv: the script and no arguments
        assert (labels["run_id"], labels["rank"], labels["local_rank"], labels["world_size"]) == (
            "run\\x1b42",
            "1",
            "1",
            "2",
        )
        assert labels["training_job"] == "run:run\\x1b42" and "job" not in labels and labels["slurm_job_id"] == "4242"
        assert data_wait > 0.5
        step_seconds = only(found["gpumon_job_step_seconds"])[1]
        assert 0.04 < step_seconds < 2.0  # 8 items x 6 ms of data wait each, on a shared 2-core box
        assert only(found["gpumon_job_steps_per_second"])[1] > 0
        assert only(found["gpumon_job_steps_total"])[1] >= 2
        assert only(found["gpumon_job_dataloader_workers"])[1] == 0
        finding, confidence = only(found["gpumon_job_finding"])
        assert finding["category"] == "input_bound" and 0 < confidence <= 1
        assert only(found["gpumon_job_finding_severity"])[0]["category"] == "input_bound"
    finally:
        job.kill()


def test_no_jobs_flag_and_replay_export_no_job_series(sock_dir: str) -> None:
    env = {protocol.SOCKET_DIR_ENV: sock_dir}
    with running_exporter("--no-jobs", "--interval", "1", env=env) as exporter:
        wait_until(lambda: "gpumon_host_cpu_utilization_ratio" in samples(scrape(exporter.url)), 20, "a sample")
        assert not any(name.startswith("gpumon_job_") for name in samples(scrape(exporter.url)))
