"""JobInfo (one hooked process, as its hello describes it) and JobGroup (the local ranks of one job): records only."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpumon import protocol


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One hooked process, as its hello describes it."""

    pid: int
    socket_path: str
    hello: protocol.Hello = field(repr=False)
    """The hello as its TypedDict: its fields need no type checks."""

    @classmethod
    def of(cls, pid: int, socket_path: str, message: Mapping[str, Any]) -> JobInfo:
        """The job a hello message describes, its fields read once (protocol.conform)."""
        return cls(pid=pid, socket_path=socket_path, hello=protocol.conform(protocol.Hello, message))

    @property
    def argv(self) -> list[str]:
        """The job's arguments, its script first ([] when the hello has none)."""
        return self.hello.get("argv") or []

    @property
    def command(self) -> str:
        """The command line as one string (the executable's name for a bare `python -c`).

        A `python -m package` run has package/__main__.py as its argv[0]: it is said as `python -m package`."""
        argv = self.argv
        executable = self.hello.get("executable") or "?"
        if argv and os.path.basename(argv[0]) == "__main__.py":
            package = os.path.basename(os.path.dirname(argv[0]))
            argv = [os.path.basename(executable) or "python", "-m", package, *argv[1:]]
        return " ".join(argv) or executable

    @property
    def cwd(self) -> str:
        """The job's working directory ('' when unknown)."""
        return self.hello.get("cwd", "")

    @property
    def owner(self) -> int | None:
        """The uid the job runs as: the socket's owner, checked when it was connected to (connection.open_hook)."""
        return self.hello.get("uid")

    @property
    def ppid(self) -> int | None:
        """The job's parent pid (its launcher, for a torchrun rank)."""
        return self.hello.get("ppid")

    @property
    def hostname(self) -> str:
        """The host the job runs on ('' when unknown)."""
        return self.hello.get("hostname", "")

    @property
    def dist(self) -> protocol.DistInfo:
        """torch.distributed's figures: rank, world size, rendezvous address, run id."""
        return self.hello.get("dist") or {}

    @property
    def rank(self) -> int | None:
        """The job's global rank (None for a single process)."""
        return self.dist.get("rank")

    @property
    def local_rank(self) -> int | None:
        """The job's rank on this node (None for a single process)."""
        return self.dist.get("local_rank")

    @property
    def world_size(self) -> int | None:
        """How many ranks the job has (None for a single process)."""
        return self.dist.get("world_size")

    @property
    def cuda(self) -> protocol.CudaInfo:
        """What the job says of CUDA: initialized, its devices, the device its steps run on."""
        return self.hello.get("cuda") or {}

    @property
    def devices(self) -> list[protocol.CudaDevice]:
        """The CUDA devices the job sees (empty until the job itself initializes CUDA)."""
        return self.cuda.get("devices") or []

    @property
    def device(self) -> int | None:
        """The index (as the job sees it) of the device its steps run on, when known."""
        return self.cuda.get("device")

    @property
    def protocol_version(self) -> int | None:
        """The protocol version the hook speaks."""
        return self.hello.get("protocol")

    @property
    def compatible(self) -> bool:
        """Whether the hook speaks this monitor's protocol version."""
        return self.protocol_version == protocol.PROTOCOL_VERSION

    @property
    def group_key(self) -> tuple[str, ...] | None:
        """What the ranks of one distributed job share, or None for a single-process job.

        The torchrun / elastic run id with the rendezvous address (every node of a job shares both; the address
        tells apart jobs left on torchrun's default run id, 'none'); else the rendezvous address
        (MASTER_ADDR:MASTER_PORT); else, for a process that says it is one of several (WORLD_SIZE > 1), its parent
        (the launcher).
        """
        dist = self.dist
        world = self.world_size
        if world is not None and world <= 1:
            return None
        run_id = dist.get("run_id")
        if run_id:
            return ("run_id", str(run_id), str(dist.get("master_addr") or ""), str(dist.get("master_port") or ""))
        if dist.get("master_addr") and dist.get("master_port") and world:
            return ("master", str(dist["master_addr"]), str(dist["master_port"]))
        if world and world > 1 and self.ppid is not None:
            return ("parent", str(self.ppid))
        return None


@dataclass(frozen=True, slots=True)
class JobGroup:
    """The local ranks of one distributed job (or one process alone), sorted by rank then pid."""

    key: tuple[str, ...] | None
    jobs: tuple[JobInfo, ...]

    @property
    def pids(self) -> list[int]:
        """Every local rank's pid, in rank order."""
        return [job.pid for job in self.jobs]

    @property
    def primary(self) -> JobInfo:
        """Rank 0 where present, else the lowest rank or pid."""
        return self.jobs[0]

    @property
    def distributed(self) -> bool:
        """Whether the group is the ranks of a distributed job (not one process alone)."""
        return self.key is not None

    @property
    def world_size(self) -> int | None:
        """How many ranks the job has in all (None for a single process)."""
        return self.primary.world_size

    @property
    def label(self) -> str:
        """'pid 1234: python train.py' or 'torchrun run abc: ranks 0,1 of 4 (pids 11, 12): python train.py'."""
        command = self.primary.command
        if not self.distributed:
            return f"pid {self.primary.pid}: {command}"
        ranks = ",".join("?" if job.rank is None else str(job.rank) for job in self.jobs)
        world = f" of {self.world_size}" if self.world_size else ""
        pids = ", ".join(str(pid) for pid in self.pids)
        assert self.key is not None
        kind = {"run_id": f"torchrun run {self.key[1]}", "master": f"DDP job at {self.key[1]}:{self.key[2]}"}.get(
            self.key[0], "DDP job"
        )
        return f"{kind}: ranks {ranks}{world} (pids {pids}): {command}"

    def with_pid(self, pid: int) -> bool:
        """Whether `pid` is one of the group's ranks."""
        return pid in self.pids


def _sort_key(job: JobInfo) -> tuple[int, int, int]:
    rank = job.rank
    return (0 if rank is not None else 1, rank if rank is not None else 0, job.pid)


def group_jobs(jobs: Iterable[JobInfo]) -> list[JobGroup]:
    """Put the ranks of each distributed job together; single-process jobs stay alone. Groups in pid order.

    Ranks of one job run as one user: processes of two users never share a group, whatever run id they claim."""
    by_key: dict[tuple[int | None, tuple[str, ...]], list[JobInfo]] = {}
    singles: list[JobGroup] = []
    for job in jobs:
        key = job.group_key
        if key is None:
            singles.append(JobGroup(None, (job,)))
        else:
            by_key.setdefault((job.owner, key), []).append(job)
    groups = singles + [JobGroup(key, tuple(sorted(members, key=_sort_key))) for (_, key), members in by_key.items()]
    return sorted(groups, key=lambda group: min(group.pids))
