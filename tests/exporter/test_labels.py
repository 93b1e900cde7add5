"""Label values: commands reduced to program + script, hostile text made printable and bounded, placement read
from cgroup text and a real child process's environment."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpumon.exporter.labels import (
    MAX_LABEL_CHARS,
    UNKNOWN,
    PlacementCache,
    label_value,
    parse_environ,
    placement_from,
    read_placement,
    short_command,
)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python3 benchmarks/training_load.py --duration 60", "python3 training_load.py"),
        ("/usr/bin/python3.11 -u -W ignore /home/alice/secret-project/train.py --token s3cret", "python3.11 train.py"),
        ("python -m torch.distributed.run --nproc_per_node 2 train.py", "python -m torch.distributed.run"),
        ("python -c import os; os.system('curl x?password=hunter2')", "python -c"),
        ("/opt/conda/bin/torchrun --nnodes=2 /work/train.py --lr 0.1", "torchrun train.py"),
        ("./my_binary --password hunter2", "my_binary"),
        ("bash /home/bob/run.sh --key abc", "bash run.sh"),
        ("", ""),
        ("python3", "python3"),
    ],
)
def test_short_command_keeps_only_program_and_script(command: str, expected: str) -> None:
    assert short_command(command) == expected


def test_label_values_are_printable_and_bounded() -> None:
    assert label_value("a\x1b[2Jb\u202ec\n") == "a\\x1b[2Jb\\u202ec\\n"
    long = label_value("x" * 10_000)
    assert len(long) == MAX_LABEL_CHARS and long.endswith("…")
    assert short_command("python3 /tmp/\x1b]0;pwned\x07.py") == "python3 \\x1b]0;pwned\\x07.py"
    assert label_value("caf\udce9") == "caf\\udce9"  # an undecodable byte of a command line stays encodable
    label_value("caf\udce9").encode("utf-8")


DOCKER_CGROUP = "0::/system.slice/docker-" + "ab" * 32 + ".scope\n"
K8S_CGROUP_V1 = (
    "12:memory:/kubepods/burstable/pod0f4b8c9e-1234-4c5d-8e9f-0123456789ab/" + "cd" * 32 + "\n"
    "11:cpu:/kubepods/burstable/pod0f4b8c9e-1234-4c5d-8e9f-0123456789ab/" + "cd" * 32 + "\n"
)
K8S_CGROUP_SYSTEMD = (
    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f4b8c9e_1234_4c5d_8e9f_0123456789ab.slice/"
    "cri-containerd-" + "ef" * 32 + ".scope\n"
)


def test_placement_from_cgroup_and_environment() -> None:
    docker = placement_from(DOCKER_CGROUP, {})
    assert docker.container_id == "ab" * 32 and docker.pod_uid == ""
    for cgroup, container in ((K8S_CGROUP_V1, "cd" * 32), (K8S_CGROUP_SYSTEMD, "ef" * 32)):
        pod = placement_from(cgroup, {"POD_NAME": "trainer-0", "POD_NAMESPACE": "ml"})
        assert pod.container_id == container
        assert pod.pod_uid == "0f4b8c9e-1234-4c5d-8e9f-0123456789ab"
        assert (pod.pod, pod.namespace) == ("trainer-0", "ml")
    plain = placement_from("0::/user.slice/user-1000.slice/session-3.scope\n", {})
    assert plain == UNKNOWN
    slurm = placement_from(
        "",
        {
            "SLURM_JOB_ID": "4242",
            "RANK": "3",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "8",
            "TORCHELASTIC_RUN_ID": "run\x1b[31m",
        },
    )
    assert (slurm.slurm_job_id, slurm.rank, slurm.local_rank, slurm.world_size) == ("4242", "3", "1", "8")
    assert slurm.run_id == "run\\x1b[31m"


def test_parse_environ_keeps_undecodable_bytes() -> None:
    assert parse_environ(b"A=1\0B=x=y\0\0NOEQUALS\0C=\xff\0") == {"A": "1", "B": "x=y", "C": "\udcff"}


def test_read_placement_of_a_real_child_process() -> None:
    env = {**os.environ, "SLURM_JOB_ID": "777", "RANK": "2", "WORLD_SIZE": "4", "POD_NAME": "p\x07od"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        deadline = time.monotonic() + 10
        placement = read_placement(child.pid)
        while placement.slurm_job_id != "777" and time.monotonic() < deadline:  # until exec has set up environ
            time.sleep(0.05)
            placement = read_placement(child.pid)
        assert (placement.slurm_job_id, placement.rank, placement.world_size) == ("777", "2", "4")
        assert placement.pod == "p\\x07od"
    finally:
        child.kill()
        child.wait()


def test_placement_cache_reads_once_and_forgets_gone_pids(tmp_path: os.PathLike[str]) -> None:
    proc = os.fspath(tmp_path)
    os.makedirs(f"{proc}/42")
    with open(f"{proc}/42/environ", "wb") as stream:
        stream.write(b"SLURM_JOB_ID=1\0")
    cache = PlacementCache(proc=proc)
    assert cache.of(42).slurm_job_id == "1"
    with open(f"{proc}/42/environ", "wb") as stream:
        stream.write(b"SLURM_JOB_ID=2\0")
    assert cache.of(42).slurm_job_id == "1"  # read once per pid
    cache.keep_only([7])
    assert cache.of(42).slurm_job_id == "2"  # a reused pid is read afresh
    assert cache.of(99) == UNKNOWN  # no such process
    assert PlacementCache(enabled=False, proc=proc).of(42) == UNKNOWN
