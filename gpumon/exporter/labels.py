"""Label values: made printable and bounded, commands reduced to program + script, and where a process runs
(container, Kubernetes pod, Slurm job, torchrun rank) read from /proc/<pid>/cgroup and /proc/<pid>/environ
(the container's Kubernetes names are added by gpumon.exporter.pods)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpumon.printable import printable

MAX_LABEL_CHARS = 128
"""A label value longer than this is cut (a hostile argv or environment must not blow up every scrape)."""
MAX_PROC_BYTES = 256 << 10
"""How much of /proc/<pid>/environ or cgroup is read: enough for any real environment, bounded for a hostile one."""
MAX_CACHED_PIDS = 4096
"""Processes whose placement is remembered; a machine never has this many GPU processes."""

_PYTHON = re.compile(r"^python[0-9.]*[mwd]?$")
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_SCRIPT_SUFFIXES = (".py", ".sh", ".pyz")
_CONTAINER_ID = re.compile(r"([0-9a-f]{64})")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")

ENV_LABELS = {
    "run_id": ("TORCHELASTIC_RUN_ID",),
    "rank": ("RANK",),
    "local_rank": ("LOCAL_RANK",),
    "world_size": ("WORLD_SIZE",),
    "pod": ("POD_NAME", "KUBERNETES_POD_NAME", "MY_POD_NAME"),
    "namespace": ("POD_NAMESPACE", "KUBERNETES_NAMESPACE", "MY_POD_NAMESPACE"),
    "slurm_job_id": ("SLURM_JOB_ID", "SLURM_JOBID"),
}
"""Label -> the environment variables it is read from, first found wins (pod and namespace: the downward API)."""

PLACEMENT_LABELS = ("container_id", "pod_uid", *ENV_LABELS, "container")
"""The labels a Placement gives, in order (`container`: the Kubernetes container's name)."""


def label_value(text: object, limit: int = MAX_LABEL_CHARS) -> str:
    """`text` made printable and at most `limit` characters: controls shown escaped, the tail cut with '…'."""
    shown = printable(str(text))
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def short_command(command: str) -> str:
    """The program and script name only, e.g. 'python3 train.py' for 'python3 /x/train.py --token s3cret'.

    Command lines can hold secrets (tokens, passwords, paths with user names), so nothing else is kept:
    `python -m pkg` keeps the module, `python -c ...` only the '-c', another program its first *.py/*.sh argument.
    """
    words = command.split()
    if not words:
        return ""
    program = os.path.basename(words[0])
    if _PYTHON.match(program):
        return label_value(f"{program} {_python_target(words[1:])}".rstrip())
    script = next((os.path.basename(word) for word in words[1:] if word.endswith(_SCRIPT_SUFFIXES)), "")
    return label_value(f"{program} {script}".rstrip())


def _python_target(arguments: list[str]) -> str:
    skip_next = False
    for index, word in enumerate(arguments):
        if skip_next:
            skip_next = False
            continue
        if word == "-m":
            return f"-m {arguments[index + 1]}" if index + 1 < len(arguments) else "-m"
        if word == "-c":
            return "-c"
        if word in _PYTHON_OPTIONS_WITH_VALUE:
            skip_next = True
            continue
        if word.startswith("-"):
            continue
        return os.path.basename(word)
    return ""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a process runs, each value '' when unknown."""

    container_id: str = ""
    pod_uid: str = ""
    run_id: str = ""
    rank: str = ""
    local_rank: str = ""
    world_size: str = ""
    pod: str = ""
    namespace: str = ""
    slurm_job_id: str = ""
    container: str = ""

    def values(self) -> tuple[str, ...]:
        return tuple(getattr(self, name) for name in PLACEMENT_LABELS)


UNKNOWN = Placement()


def placement_from(cgroup: str, environ: Mapping[str, str]) -> Placement:
    """A Placement from the text of /proc/<pid>/cgroup and the process's environment."""
    container_ids = _CONTAINER_ID.findall(cgroup)
    pod_uids = _POD_UID.findall(cgroup)
    from_env = {
        label: label_value(next((environ[name] for name in names if environ.get(name)), ""))
        for label, names in ENV_LABELS.items()
    }
    return Placement(
        container_id=container_ids[-1] if container_ids else "",
        pod_uid=pod_uids[-1].replace("_", "-") if pod_uids else "",
        **from_env,
    )


def parse_environ(data: bytes) -> dict[str, str]:
    """The variables of a /proc/<pid>/environ image (NUL separated); undecodable bytes kept as escapes."""
    variables: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            variables[name.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
    return variables


def _read_bounded(path: str) -> bytes:
    with open(path, "rb") as stream:
        return stream.read(MAX_PROC_BYTES)


def read_placement(pid: int, proc: str = "/proc") -> Placement:
    """Where `pid` runs, from what this user may read of /proc (root: every process; else only its own)."""
    try:
        cgroup = _read_bounded(f"{proc}/{pid}/cgroup").decode("utf-8", "replace")
    except OSError:
        cgroup = ""
    try:
        environ = parse_environ(_read_bounded(f"{proc}/{pid}/environ"))
    except OSError:  # another user's process, or gone: only what the cgroup says
        environ = {}
    return placement_from(cgroup, environ)


class PlacementCache:
    """Placements of the processes seen, read once per pid and forgotten when the pid is no longer sampled.

    Disabled (every process UNKNOWN) for a replayed recording: its pids name processes of another machine.
    `complete` adds what /proc does not say (pods.ContainerNames.fill: the Kubernetes names of its container).
    """

    def __init__(
        self, enabled: bool = True, proc: str = "/proc", complete: Callable[[Placement], Placement] | None = None
    ) -> None:
        self.enabled = enabled
        self._proc = proc
        self._complete = complete
        self._known: dict[int, Placement] = {}

    def of(self, pid: int) -> Placement:
        if not self.enabled:
            return UNKNOWN
        known = self._known.get(pid)
        if known is None:
            if len(self._known) >= MAX_CACHED_PIDS:
                self._known.clear()
            known = read_placement(pid, self._proc)
            if self._complete is not None:
                known = self._complete(known)
            self._known[pid] = known
        return known

    def keep_only(self, pids: Iterable[int]) -> None:
        """Forget every pid not in `pids` (a reused pid is then read afresh)."""
        alive = set(pids)
        for pid in [pid for pid in self._known if pid not in alive]:
            del self._known[pid]
