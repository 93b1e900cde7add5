"""A real 2-node torchrun job on loopback: two torchrun agents (node ranks 0 and 1, gloo on the CPU) each launched by
`gpumon run` with a socket directory of its own, each node's exporter (its own host label) seeing only its rank, a
real Prometheus scraping both. The fleet snapshot read from it holds ONE job with both ranks, and names rank 1 (on
the other node, the one waiting 30 ms for each batch) the straggler; `gpumon jobs --json` shown both socket
directories groups the two ranks as one job too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import REPO, running_exporter, wait_until
from prometheus_helpers import NO_BINARY, api, free_port, prometheus_binary, running_prometheus

from gpumon import protocol
from gpumon.fleet import FleetSnapshot, JobRow, PromClient, read_fleet
from gpumon.fleet.snapshot import FINDING_QUERY, JOB_QUERIES
from gpumon.jobs.procfs import process_command

NODES = ("sim-node-a", "sim-node-b")
"""The host labels of the recorded GPU answers in tests/fixtures/prometheus, so recorded job answers fit them."""
RECORD_ENV = "GPUMON_RECORD_PROMETHEUS"
"""Set to a directory: the run also writes Prometheus's answers to the fleet's job queries there (the recorded
answers of tests/fleet's multi-node view were made so)."""
JOB_TIMEOUT = 45.0
"""Seconds for both ranks to be up, then for their figures to reach Prometheus (a shared 2-core machine)."""
PEAK_QUERY = "gpumon_job_peak_memory_bytes"
LAUNCHER_GRACE_S = 40.0
"""Ctrl+C to stopped: torchrun gives its ranks 30 s before it SIGKILLs them."""

DDP_JOB = r"""
import sys, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

backend = sys.argv[1]
dist.init_process_group(backend)
rank = dist.get_rank()
device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")  # each node sees its one GPU


class Batches(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, index):
        if rank == 1:
            time.sleep(0.03)
        return torch.randn(64), torch.randn(64)


model = torch.nn.Linear(64, 64).to(device)
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if device.type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(Batches(), batch_size=1):
    x, y = x.to(device), y.to(device)
    loss = (model(x) - y).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.fixture
def socket_dirs() -> Iterator[dict[str, str]]:
    """One private socket directory per node (short paths under /tmp: AF_UNIX paths are limited)."""
    base = tempfile.mkdtemp(prefix="gpumon-2n-", dir="/tmp")
    dirs = {}
    for node in NODES:
        dirs[node] = os.path.join(base, node)
        os.mkdir(dirs[node], 0o700)
    yield dirs
    shutil.rmtree(base, ignore_errors=True)


def two_gpus() -> bool:
    """Whether 2 GPUs are visible, asked in a child so this process holds no CUDA state."""
    probe = "import torch; print(torch.cuda.is_available() and torch.cuda.device_count() >= 2)"
    try:
        answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return answer.stdout.strip().endswith("True")


BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=pytest.mark.skipif(
            not shutil.which("nvidia-smi") or not two_gpus(), reason="NCCL nodes need 2 GPUs (run on nvidia-h200-x2)"
        ),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_node_torchrun_is_one_job_in_the_fleet_and_in_gpumon_jobs(
    socket_dirs: dict[str, str], tmp_path: Path, backend: str
) -> None:
    binary = prometheus_binary()
    if binary is None:
        pytest.skip(NO_BINARY)
    pytest.importorskip("torch.distributed.run", reason="torchrun (torch.distributed.run) is not installed")
    script = tmp_path / "ddp_job.py"
    script.write_text(DDP_JOB)
    master_port = free_port()
    launchers: list[subprocess.Popen[str]] = []
    rank_pids: list[int] = []
    try:
        for node_rank, node in enumerate(NODES):
            launchers.append(launch_node(script, backend, node_rank, master_port, socket_dirs[node], tmp_path / node))
        groups = wait_for_both_ranks(socket_dirs, launchers, script)
        rank_pids = [job["pid"] for group in groups for job in group["jobs"]]
        assert len(groups) == 1, groups
        (group,) = groups
        assert [job["dist"]["rank"] for job in group["jobs"]] == [0, 1], group
        assert group["label"].startswith("torchrun run none: ranks 0,1 of 2 "), group["label"]
        assert group["group"] == ["run_id", "none", "127.0.0.1", str(master_port)]

        with ExitStack() as stack:
            exporters = [
                stack.enter_context(
                    running_exporter(
                        "--interval",
                        "1",
                        "--host-label",
                        node,
                        *(("--only", str(node_rank)) if backend == "nccl" else ()),  # the node's one GPU
                        env={protocol.SOCKET_DIR_ENV: socket_dirs[node], "PYTHONPATH": str(REPO)},
                    )
                )
                for node_rank, node in enumerate(NODES)
            ]
            base = stack.enter_context(running_prometheus(binary, tmp_path, [e.url for e in exporters]))
            client = PromClient(base, timeout=5.0)
            job = wait_for_fleet_job(client)
            series = api(base, "/api/v1/query", query="gpumon_job_data_wait_ratio")["result"]
            if backend == "nccl":
                check_gpu_series(client, base)
            if os.environ.get(RECORD_ENV):
                record_job_answers(base, Path(os.environ[RECORD_ENV]))
                record_fleet(base, [e.url for e in exporters], Path(os.environ[RECORD_ENV]))
        job_key = f"run:none@127.0.0.1:{master_port}"
        assert job.run_id == job_key
        assert [(rank.host, rank.rank) for rank in job.ranks] == [("sim-node-a", 0), ("sim-node-b", 1)]
        assert {(item["metric"]["host"], item["metric"]["rank"]) for item in series} == {
            ("sim-node-a", "0"),
            ("sim-node-b", "1"),
        }
        # The exporter's key is training_job: Prometheus' own job label stays the scrape job's name, nothing renamed.
        assert {item["metric"]["training_job"] for item in series} == {job_key}
        assert {item["metric"]["job"] for item in series} == {"gpumon"}
        assert not any("exported_job" in item["metric"] for item in series)
        slow = job.ranks[1]
        assert slow.data_wait is not None and job.ranks[0].data_wait is not None
        assert slow.data_wait > job.ranks[0].data_wait, job.ranks
        assert job.straggler == 1, job
    finally:
        stop_launchers(launchers, rank_pids, script)


def launch_node(
    script: Path, backend: str, node_rank: int, master_port: int, socket_dir: str, log: Path
) -> subprocess.Popen[str]:
    """One node: `gpumon run --no-tui -- torchrun --nnodes 2 --node-rank N ...` serving in its own socket dir.

    NCCL: node N sees only GPU N, and talks to the other node over sockets on loopback as between two hosts (no
    peer-to-peer or shared-memory shortcut within the one machine)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env[protocol.SOCKET_DIR_ENV] = socket_dir
    env.pop("GPUMON_KNOBS", None)
    if backend == "nccl":
        env.update(
            CUDA_VISIBLE_DEVICES=str(node_rank),
            NCCL_P2P_DISABLE="1",
            NCCL_SHM_DISABLE="1",
            NCCL_IB_DISABLE="1",
            NCCL_SOCKET_IFNAME="lo",
        )
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node_rank)]
    torchrun += ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(master_port)]
    with log.open("w") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "gpumon", "run", "--no-tui", "--", *torchrun, str(script), backend],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def wait_for_both_ranks(
    socket_dirs: dict[str, str], launchers: list[subprocess.Popen[str]], script: Path
) -> list[dict[str, Any]]:
    """The groups `gpumon jobs --json` lists, given both nodes' socket directories, with a rank of this job (other
    jobs of this user, in the usual socket directories, are left out), once both ranks are listed."""
    command = [sys.executable, "-m", "gpumon", "jobs", "--json"]
    for directory in socket_dirs.values():
        command += ["--socket-dir", directory]
    deadline = time.monotonic() + JOB_TIMEOUT
    groups: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        for launcher in launchers:
            assert launcher.poll() is None, f"a node's launcher exited with {launcher.returncode}"
        listed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30, check=True)
        groups = [json.loads(line) for line in listed.stdout.splitlines()]
        groups = [group for group in groups if any(job["argv"][:1] == [str(script)] for job in group["jobs"])]
        if sum(len(group["jobs"]) for group in groups) >= 2:
            return groups
        time.sleep(0.5)
    raise AssertionError(f"both ranks not listed within {JOB_TIMEOUT:g} s: {groups}")


def wait_for_fleet_job(client: PromClient) -> JobRow:
    """The fleet's one job, once both ranks' step time and data-wait share are in Prometheus."""
    snapshot: FleetSnapshot | None = None

    def both_ranks() -> bool:
        nonlocal snapshot
        snapshot = read_fleet(client)
        ranks = [rank for job in snapshot.jobs for rank in job.ranks if rank.data_wait is not None]
        return len(ranks) >= 2 and all(rank.step_ms for rank in ranks)

    wait_until(both_ranks, JOB_TIMEOUT, "both ranks' step figures in Prometheus", interval=0.5)
    assert snapshot is not None
    assert len(snapshot.jobs) == 1, snapshot.jobs
    return snapshot.jobs[0]


def check_gpu_series(client: PromClient, base: str) -> None:
    """On GPUs: both hosts' GPU rows in the fleet, and each rank's peak CUDA memory exported by its own node."""
    snapshot = read_fleet(client)
    assert snapshot.error is None, snapshot.error
    assert set(snapshot.hosts) == set(NODES), snapshot.hosts
    assert sorted((gpu.host, gpu.gpu) for gpu in snapshot.gpus) == [(NODES[0], "0"), (NODES[1], "1")], snapshot.gpus
    peaks = {
        item["metric"]["host"]: float(item["value"][1])
        for item in api(base, "/api/v1/query", query=PEAK_QUERY)["result"]
    }
    assert set(peaks) == set(NODES) and all(peak > 0 for peak in peaks.values()), peaks


def record_job_answers(base: str, directory: Path) -> None:
    """Prometheus's own answers to the fleet's job queries, once both ranks have a finding: query-2node-job-*.json."""
    wait_until(
        lambda: len(api(base, "/api/v1/query", query=FINDING_QUERY)["result"]) >= 2,
        JOB_TIMEOUT,
        "both ranks' findings in Prometheus",
        interval=0.5,
    )
    directory.mkdir(parents=True, exist_ok=True)
    for name, promql in {**JOB_QUERIES, "finding": FINDING_QUERY}.items():
        url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=5.0) as response:
            (directory / f"query-2node-job-{name}.json").write_bytes(response.read())


class RecordingPromClient(PromClient):
    """A PromClient that keeps each answer's body, by PromQL (a range query's under "range:" + PromQL)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url, timeout=5.0)
        self.answers: dict[str, str] = {}

    def _get(self, path: str, params: dict[str, str], deadline: float) -> bytes:
        body = super()._get(path, params, deadline)
        key = ("range:" if path.endswith("query_range") else "") + params["query"]
        self.answers[key] = body.decode()
        return body


def record_fleet(base: str, exporter_urls: list[str], directory: Path) -> None:
    """Everything the fleet view reads, as Prometheus answered it (fleet-answers.json: the read's time and each
    query's answer), and each node's exporter scrape at that moment (scrape-HOST.txt)."""
    client = RecordingPromClient(base)
    now = time.time()
    snapshot = read_fleet(client, now=now)
    assert snapshot.error is None, snapshot.error
    directory.mkdir(parents=True, exist_ok=True)
    record = {"now": now, "answers": client.answers}
    (directory / "fleet-answers.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    for node, url in zip(NODES, exporter_urls, strict=True):
        with urllib.request.urlopen(url, timeout=5.0) as response:
            (directory / f"scrape-{node}.txt").write_bytes(response.read())


def stop_launchers(launchers: list[subprocess.Popen[str]], rank_pids: list[int], script: Path) -> None:
    """Ctrl+C to each node's process group (gpumon run passes it on to torchrun), then SIGKILL what is left."""
    for launcher in launchers:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGINT)
    deadline = time.monotonic() + LAUNCHER_GRACE_S
    for launcher in launchers:
        try:
            launcher.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    for pid in rank_pids:  # torchrun starts each rank in a session of its own: a rank it left is killed here
        if str(script) in process_command(pid):
            os.kill(pid, signal.SIGKILL)
