"""The fallback for jobs without the hook: sample the main thread with py-spy and estimate where its time goes.

py-spy (`pip install py-spy`) runs in rounds of `py-spy record --format raw --idle --threads --nonblocking`
(the job is never paused; with --native it is, at each sample: py-spy refuses --native with --nonblocking); each
main-thread stack is put in one category: waiting on the DataLoader, CUDA sync, forward, backward, optimizer step,
or elsewhere. The result is an ESTIMATE from stack samples.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpumon import protocol
from gpumon.jobs.discovery import AttachError, process_argv, process_command
from gpumon.jobs.source import Listener
from gpumon.printable import printable
from gpumon.protocol import activity

log = logging.getLogger(__name__)

DATA_WAIT = "data_wait"
CUDA_SYNC = "cuda_sync"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
COMM = "comm"
H2D = "h2d"
USER_CODE = "user_code"
ELSEWHERE = "elsewhere"
CATEGORIES = (DATA_WAIT, CUDA_SYNC, FORWARD, BACKWARD, OPTIMIZER, COMM, H2D, USER_CODE, ELSEWHERE)
LABELS = {
    DATA_WAIT: "waiting on DataLoader",
    CUDA_SYNC: "CUDA sync",
    FORWARD: "forward",
    BACKWARD: "backward",
    OPTIMIZER: "optimizer step",
    COMM: "torch.distributed",
    H2D: "host->device copy",
    USER_CODE: "the job's own code",
    ELSEWHERE: "elsewhere",
}
METHOD_LABEL = "estimate (py-spy, no hook)"

RATE = 50
"""Samples per second py-spy takes (of every thread; the main thread's are kept)."""
ROUND_S = 1
"""Seconds per py-spy run (py-spy takes whole seconds); each run ends with one estimate update."""
RECENT_ROUNDS = 5
"""The 'recent' estimate covers this many rounds."""
TIMELINE_ROUNDS = 3600
PROBE_TIMEOUT = 10.0
PROBE_ATTEMPTS = 3

PERMISSION_HELP = (
    "py-spy may not read pid {pid}'s memory (ptrace permission denied): run gpumon as root (sudo), or grant py-spy "
    "the capability once with `sudo setcap cap_sys_ptrace+ep $(which py-spy)`, or allow same-user tracing with "
    "`echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope`; or add `import gpumon.hook` to the job"
)
OTHER_USER_HELP = (
    "pid {pid} belongs to {owner}: only its owner or root can watch it "
    "(as {owner}, or with sudo; the job can also add `import gpumon.hook` for its owner's gpumon)"
)
MISSING_HELP = (
    "pid {pid} has no gpumon hook and py-spy is not installed: `pip install py-spy` "
    "(gpumon depends on it; reinstall gpumon), or add `import gpumon.hook` to the job"
)


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame as py-spy prints it: 'Class.function' (newer Pythons give the qualified name), file, line."""

    name: str
    file: str
    line: int = 0

    @property
    def function(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.name} ({self.file}:{self.line})"


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread's stack in one sample (or `count` identical samples); frames innermost first."""

    thread_id: int | None
    thread_name: str
    frames: tuple[Frame, ...]
    count: int = 1
    active: bool | None = None


# ---------------------------------------------------------------------------------------------
# Classifying a main-thread stack: gpumon.protocol.activity, the classifier the hook's own sampler uses too.

_NATIVE_SYNC = re.compile(
    r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cuStreamSynchronize"
    r"|cuEventSynchronize|cuCtxSynchronize|cudaMemcpy|cuMemcpy)"
)
"""C functions (libcudart, libcuda) in which a thread waits for the GPU, seen only with py-spy --native."""
SYNC_NATIVE = "native"
SYNC_TORCH = activity.SEEN_TORCH
SYNC_SOURCE = activity.SEEN_SOURCE
SYNC_EVIDENCE = (SYNC_NATIVE, SYNC_TORCH, SYNC_SOURCE)
"""How a CUDA sync sample was recognised: a native CUDA frame, a torch sync function, or only the source text of
the job's line (the least sure: e.g. a print() of a CPU value reads the same)."""
_CATEGORY_OF = {
    activity.DATA_WAIT: DATA_WAIT,
    activity.DATA_COLLATE: DATA_WAIT,
    activity.DATA_LOAD: DATA_WAIT,
    activity.SYNC: CUDA_SYNC,
    activity.FORWARD: FORWARD,
    activity.BACKWARD: BACKWARD,
    activity.OPTIMIZER: OPTIMIZER,
    activity.COMM: COMM,
    activity.H2D: H2D,
    activity.CPU: USER_CODE,
    activity.OTHER: ELSEWHERE,
}

SourceLine = activity.SourceLine
is_native = activity.is_native
is_library = activity.is_library


linecache_line = activity.linecache_line


def job_source(pid: int) -> SourceLine:
    """Source lines as the job sees them: `<string>` frames from its `python -c CODE` and relative paths from its
    working directory, falling back to linecache_line."""
    argv = process_argv(pid)
    code_lines = argv[argv.index("-c", 1) + 1].splitlines() if "-c" in argv[1:-1] else []
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        cwd = ""

    def source_line(file: str, line: int) -> str:
        if file == "<string>" and 0 < line <= len(code_lines):
            return code_lines[line - 1]
        if file and cwd and not os.path.isabs(file):
            file = os.path.join(cwd, file)
        return linecache_line(file, line)

    return source_line


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the job's own code (outside torch, the standard library and site-packages)."""
    return next((frame for frame in frames if not is_library(frame)), None)


def classify_stack(frames: Sequence[Frame], source_line: SourceLine = linecache_line) -> str:
    """The category of one main-thread stack (frames innermost first); see classify_stack_how."""
    return classify_stack_how(frames, source_line)[0]


def activity_of(frames: Sequence[Frame], source_line: SourceLine = linecache_line) -> tuple[str, str | None]:
    """gpumon.protocol.activity.classify with py-spy --native's CUDA wait frames as syncs (how: SYNC_NATIVE)."""
    native = any(is_native(frame) and _NATIVE_SYNC.match(frame.function) for frame in frames)
    kind, how = activity.classify(frames, source_line, native_sync=native)
    return kind, (SYNC_NATIVE if native and kind == activity.SYNC else how)


def classify_stack_how(frames: Sequence[Frame], source_line: SourceLine = linecache_line) -> tuple[str, str | None]:
    """The estimate's category of one main-thread stack (frames innermost first) and, for a CUDA sync, how it was
    seen: gpumon.protocol.activity.classify (the hook's sampler reads stacks the same way), its activities grouped
    into this estimate's categories. Without --native, C++ frames are invisible: a blocking .item() shows as the
    Python line that calls it, hence the source-line rules there."""
    kind, how = activity_of(frames, source_line)
    category = _CATEGORY_OF.get(kind, ELSEWHERE)
    return category, (how if category == CUDA_SYNC else None)


# ---------------------------------------------------------------------------------------------
# Parsing py-spy's output.

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")
_RAW_THREAD = re.compile(r"^thread \((?P<tid>[0-9a-fA-Fx]+)\)(?:: (?P<name>.*))?$")
_DUMP_THREAD = re.compile(r'^Thread (?P<tid>0x[0-9a-fA-F]+|\d+)(?: \((?P<status>[^)]*)\))?(?:: "(?P<name>.*)")?')


def parse_frame(text: str) -> Frame:
    match = _FRAME.match(text.strip())
    if match is None:
        return Frame(name=text.strip(), file="")
    return Frame(name=match["name"], file=match["file"], line=int(match["line"] or 0))


def _parse_tid(text: str) -> int | None:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_raw(text: str) -> list[ThreadStack]:
    """`py-spy record --format raw --threads` output: 'thread (TID): NAME;outer (f:l);...;inner (f:l) COUNT'."""
    stacks: list[ThreadStack] = []
    for line in text.splitlines():
        line = line.rstrip()
        head, _, count_text = line.rpartition(" ")
        if not head or not count_text.isdigit():
            continue
        parts = head.split(";")
        thread_id, thread_name = None, ""
        match = _RAW_THREAD.match(parts[0])
        if match is not None:
            thread_id, thread_name = _parse_tid(match["tid"]), match["name"] or ""
            parts = parts[1:]
        frames = tuple(parse_frame(part) for part in reversed(parts) if part)
        stacks.append(ThreadStack(thread_id, thread_name, frames, int(count_text)))
    return stacks


def parse_dump(text: str) -> list[ThreadStack]:
    """`py-spy dump` text output: 'Thread 123 (active): "MainThread"' then frames, innermost first."""
    stacks: list[ThreadStack] = []
    current: tuple[int | None, str, bool | None] | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        match = _DUMP_THREAD.match(line)
        if match is not None:
            if current is not None:
                stacks.append(ThreadStack(current[0], current[1], tuple(frames), 1, current[2]))
            status = match["status"] or ""
            current = (_parse_tid(match["tid"]), match["name"] or "", "active" in status if status else None)
            frames = []
        elif current is not None and line.startswith(" ") and line.strip():
            frames.append(parse_frame(line))
    if current is not None:
        stacks.append(ThreadStack(current[0], current[1], tuple(frames), 1, current[2]))
    return stacks


def parse_dump_json(text: str) -> list[ThreadStack]:
    """`py-spy dump --json` output."""
    stacks = []
    for thread in json.loads(text):
        frames = tuple(
            Frame(
                name=str(f.get("name", "")),
                file=str(f.get("filename") or f.get("short_filename", "")),
                line=int(f.get("line") or 0),
            )
            for f in thread.get("frames", [])
        )
        tid = thread.get("os_thread_id") or thread.get("thread_id")
        stacks.append(
            ThreadStack(
                tid if isinstance(tid, int) else None,
                str(thread.get("thread_name") or ""),
                frames,
                1,
                thread.get("active"),
            )
        )
    return stacks


def main_thread_stacks(stacks: Iterable[ThreadStack], pid: int | None = None) -> list[ThreadStack]:
    """The main thread's stacks: its OS thread id is the pid; failing that, the thread named MainThread."""
    stacks = list(stacks)
    if pid is not None:
        by_tid = [stack for stack in stacks if stack.thread_id == pid]
        if by_tid:
            return by_tid
    return [stack for stack in stacks if stack.thread_name == "MainThread"]


def classify(
    stacks: Iterable[ThreadStack], pid: int | None = None, source_line: SourceLine = linecache_line
) -> Counter[str]:
    """Sample counts per category over the main thread's stacks."""
    counts: Counter[str] = Counter()
    for stack in main_thread_stacks(stacks, pid):
        counts[classify_stack(stack.frames, source_line)] += stack.count
    return counts


def fractions(counts: Mapping[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {category: (counts.get(category, 0) / total if total else 0.0) for category in CATEGORIES}


# ---------------------------------------------------------------------------------------------
# Checking the target and finding py-spy.


def find_pyspy() -> str | None:
    """py-spy next to this Python (a venv not on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as stream:
            return stream.read().strip()
    except OSError:
        return "?"


def is_python_process(pid: int) -> bool | None:
    """True/False from /proc (the executable's name, or libpython mapped in); None when /proc does not say."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return None
    if exe.startswith(("python", "pypy")):
        return True
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                if "libpython" in line:
                    return True
    except OSError:
        return None
    return False


def check_target(pid: int) -> None:
    """Raise AttachError (one line) when `pid` is not a live Python process."""
    if pid <= 0:
        raise AttachError(f"{pid} is not a valid pid")
    if not os.path.exists(f"/proc/{pid}"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise AttachError(f"no process with pid {pid}") from None
        except PermissionError:
            pass
    if is_python_process(pid) is False:
        raise AttachError(f"pid {pid} ({process_name(pid)}) is not a Python process")


def _other_owner(pid: int) -> str | None:
    """The user name (or uid) owning `pid` when that is another user and we are not root; else None."""
    euid = os.geteuid()
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    if euid == 0 or uid == euid:
        return None
    try:
        import pwd

        return printable(pwd.getpwuid(uid).pw_name)
    except (KeyError, ImportError):
        return f"uid {uid}"


def explain_pyspy_failure(pid: int, output: str, returncode: int | None = None) -> str:
    """One line for what went wrong in a py-spy run, from its stderr."""
    text = output.strip()
    if "Permission Denied" in text or "Operation not permitted" in text or "EPERM" in text:
        owner = _other_owner(pid)
        if owner is not None:  # no capability or ptrace setting lets one user read another's process: never advised
            return OTHER_USER_HELP.format(pid=pid, owner=owner)
        return PERMISSION_HELP.format(pid=pid)
    if "Failed to find python version" in text:
        return f"pid {pid} ({process_name(pid)}) does not look like a Python process py-spy can read"
    if "No such file or directory" in text or "No such process" in text or "process exited" in text.lower():
        return f"no process with pid {pid} (it exited?)"
    for line in text.splitlines():
        if line.startswith("Error:"):
            return f"py-spy failed on pid {pid}: {line[len('Error:') :].strip()}"
    first = next((line for line in text.splitlines() if line.strip()), f"exit code {returncode}")
    return f"py-spy failed on pid {pid}: {first.strip()}"


def probe(pid: int, pyspy: str | None = None, timeout: float = PROBE_TIMEOUT) -> list[ThreadStack]:
    """Check that py-spy can read `pid` (one `py-spy dump`); return its stacks or raise AttachError."""
    check_target(pid)
    pyspy = pyspy or find_pyspy()
    if pyspy is None:
        raise AttachError(MISSING_HELP.format(pid=pid))
    failure = ""
    for _attempt in range(PROBE_ATTEMPTS):
        try:
            done = subprocess.run(
                [pyspy, "dump", "--pid", str(pid), "--nonblocking"],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=_quiet_env(),
            )
        except subprocess.TimeoutExpired:
            raise AttachError(f"py-spy did not read pid {pid} within {timeout:g} s") from None
        except OSError as error:
            raise AttachError(f"cannot run {pyspy}: {error.strerror or error}") from None
        if done.returncode == 0:
            return parse_dump(done.stdout)
        failure = explain_pyspy_failure(pid, done.stderr + done.stdout, done.returncode)
        if not failure.startswith("py-spy failed"):
            break  # permission, not Python, gone: trying again will not help
        time.sleep(0.1)  # a non-blocking read can catch the process mid-change: try again
    raise AttachError(failure)


def _quiet_env() -> dict[str, str]:
    """py-spy's environment without Rust backtraces in its error messages."""
    return {**os.environ, "RUST_BACKTRACE": "0"}


# ---------------------------------------------------------------------------------------------
# The sampler.


@dataclass(frozen=True, slots=True)
class EstimateView:
    """What the py-spy sampler has estimated so far about a job's main thread."""

    pid: int
    command: str = ""
    rate: int = RATE
    round_s: int = ROUND_S
    rounds: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    """Main-thread samples per category since the start."""
    recent: Mapping[str, int] = field(default_factory=dict)
    """The same over the last RECENT_ROUNDS rounds."""
    timeline: tuple[Mapping[str, float], ...] = ()
    """Per round: the fraction of each category."""
    hot_frames: Mapping[str, str] = field(default_factory=dict)
    """Per category, the most frequent innermost frame in the recent rounds (for a CUDA sync and the job's own code:
    the job's own frame)."""
    sync_evidence: Mapping[str, int] = field(default_factory=dict)
    """CUDA sync samples since the start by how they were recognised (SYNC_EVIDENCE)."""
    recent_sync_evidence: Mapping[str, int] = field(default_factory=dict)
    native: bool = False
    """Sampled with py-spy --native (C/C++ frames seen)."""
    ended: bool = False
    end_reason: str | None = None
    started: float = 0.0
    method: str = METHOD_LABEL

    @property
    def samples(self) -> int:
        return sum(self.counts.values())

    @property
    def recent_samples(self) -> int:
        return sum(self.recent.values())

    @property
    def fractions(self) -> dict[str, float]:
        return fractions(self.counts)

    @property
    def recent_fractions(self) -> dict[str, float]:
        return fractions(self.recent)

    @property
    def dominant(self) -> str | None:
        counts = self.recent or self.counts
        return max(CATEGORIES, key=lambda c: counts.get(c, 0)) if sum(counts.values()) else None

    @property
    def pids(self) -> list[int]:
        return [self.pid]

    @property
    def worker_pids(self) -> list[int]:
        """Unknown without the hook."""
        return []

    @property
    def device_uuids(self) -> list[str]:
        """Unknown without the hook."""
        return []

    def to_dict(self) -> dict[str, object]:
        """The `--json` line for this estimate."""
        return {
            "type": "estimate",
            "pid": self.pid,
            "method": "py-spy",
            "estimate": True,
            "rate": self.rate,
            "rounds": self.rounds,
            "samples": self.samples,
            "counts": {c: self.counts.get(c, 0) for c in CATEGORIES},
            "fractions": {c: round(v, 4) for c, v in self.fractions.items()},
            "recent_samples": self.recent_samples,
            "recent_fractions": {c: round(v, 4) for c, v in self.recent_fractions.items()},
            "hot_frames": dict(self.hot_frames),
            "ended": self.ended,
            "end_reason": self.end_reason,
            "sync_evidence": {how: self.sync_evidence.get(how, 0) for how in SYNC_EVIDENCE},
            "recent_sync_evidence": {how: self.recent_sync_evidence.get(how, 0) for how in SYNC_EVIDENCE},
            "native": self.native,
        }


class PySpySampler:
    """Runs py-spy against `pid` in rounds on a daemon thread and keeps the estimate; `view()` copies it out.

    Call `probe()` first for the one-line errors (no such pid, not Python, py-spy missing, no permission).
    """

    def __init__(
        self,
        pid: int,
        *,
        rate: int = RATE,
        round_s: int = ROUND_S,
        pyspy: str | None = None,
        source_line: SourceLine | None = None,
        native: bool = False,
    ) -> None:
        self.pid = pid
        self.native = native
        """py-spy --native, which pauses the job at each sample to unwind its C/C++ frames."""
        self.rate = rate
        self.round_s = max(1, int(round_s))
        self.pyspy = pyspy or find_pyspy()
        self.source_line = source_line if source_line is not None else job_source(pid)
        self.command = process_command(pid)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._recent: deque[tuple[Counter[str], Counter[tuple[str, str]], Counter[str]]] = deque(maxlen=RECENT_ROUNDS)
        self._sync_evidence: Counter[str] = Counter()
        self._timeline: deque[Mapping[str, float]] = deque(maxlen=TIMELINE_ROUNDS)
        self._rounds = 0
        self._ended = False
        self._end_reason: str | None = None
        self._started = time.time()
        self._listeners: list[Listener] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._proc_lock = threading.Lock()
        self._workdir: str | None = None
        self._failed_rounds = 0

    def probe(self) -> None:
        """Raise AttachError (one line) when py-spy cannot sample this pid."""
        probe(self.pid, self.pyspy)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self, listener: Listener | None = None) -> None:
        if listener is not None:
            self.add_listener(listener)
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"gpumon-pyspy-{self.pid}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._kill_round()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def primary(self) -> None:
        """No hook client: py-spy only reads the job's stacks (JobSource.primary)."""
        return None

    def view(self) -> EstimateView:
        with self._lock:
            recent: Counter[str] = Counter()
            frames: Counter[tuple[str, str]] = Counter()
            recent_evidence: Counter[str] = Counter()
            for counts, hot, evidence in self._recent:
                recent.update(counts)
                frames.update(hot)
                recent_evidence.update(evidence)
            hot_frames: dict[str, str] = {}
            for (category, frame), _count in frames.most_common():
                hot_frames.setdefault(category, frame)
            return EstimateView(
                pid=self.pid,
                command=self.command,
                rate=self.rate,
                round_s=self.round_s,
                rounds=self._rounds,
                counts=dict(self._counts),
                recent=dict(recent),
                timeline=tuple(self._timeline),
                hot_frames=hot_frames,
                ended=self._ended,
                end_reason=self._end_reason,
                started=self._started,
                sync_evidence=dict(self._sync_evidence),
                recent_sync_evidence=dict(recent_evidence),
                native=self.native,
            )

    # -- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self.pyspy is None:
                self._end(MISSING_HELP.format(pid=self.pid))
                return
            self._workdir = tempfile.mkdtemp(prefix="gpumon-pyspy-")
            output = os.path.join(self._workdir, "round.txt")
            while not self._stop.is_set():
                if not self._one_round(output):
                    return
        except Exception as error:  # never out of this thread
            log.error("py-spy job %s: the sampler thread failed", self.pid, exc_info=True)
            self._end(f"internal error: {error!r}")

    def _one_round(self, output: str) -> bool:
        """Run py-spy for one round and take its samples; False when sampling is over."""
        command = [
            self.pyspy or "py-spy",
            "record",
            "--pid",
            str(self.pid),
            "--format",
            "raw",
            "--rate",
            str(self.rate),
            "--duration",
            str(self.round_s),
            "--idle",
            "--threads",
            "--full-filenames",
            "--output",
            output,
            # py-spy exits with "Can't get native stack traces with the --nonblocking option" for the two together.
            *(["--native"] if self.native else ["--nonblocking"]),
        ]
        try:
            os.unlink(output)
        except OSError:
            pass
        with self._proc_lock:
            if self._stop.is_set():
                return False
            try:
                proc = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_quiet_env()
                )
            except OSError as error:
                self._end(f"cannot run py-spy: {error.strerror or error}")
                return False
            self._proc = proc
        try:
            _out, err = proc.communicate(timeout=self.round_s + PROBE_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            _out, err = proc.communicate()
        finally:
            with self._proc_lock:
                self._proc = None
        if self._stop.is_set():
            return False
        try:
            with open(output, encoding="utf-8", errors="replace") as stream:
                text = stream.read()
        except OSError:
            text = ""
        if text:
            self._take(parse_raw(text))
        exited = "process exited" in (err or "") or not protocol.pid_alive(self.pid)
        if exited:
            self._end("the process exited")
            return False
        if proc.returncode != 0 and not text:
            self._failed_rounds += 1
            failure = explain_pyspy_failure(self.pid, err or "", proc.returncode)
            if self._failed_rounds >= PROBE_ATTEMPTS or not failure.startswith("py-spy failed"):
                self._end(failure)
                return False
        else:
            self._failed_rounds = 0
        return True

    def _take(self, stacks: list[ThreadStack]) -> None:
        counts: Counter[str] = Counter()
        hot: Counter[tuple[str, str]] = Counter()
        evidence: Counter[str] = Counter()
        for stack in main_thread_stacks(stacks, self.pid):
            category, how = classify_stack_how(stack.frames, self.source_line)
            counts[category] += stack.count
            if how is not None:
                evidence[how] += stack.count
            own = user_frame(stack.frames) if category in (CUDA_SYNC, USER_CODE) else None
            frame = own or _innermost_python(stack.frames)
            if frame is not None:
                hot[(category, _short(frame))] += stack.count
        with self._lock:
            self._counts.update(counts)
            self._sync_evidence.update(evidence)
            self._rounds += 1
            self._recent.append((counts, hot, evidence))
            if counts:
                self._timeline.append(fractions(counts))
        self._notify("estimate")

    def _end(self, reason: str) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
            self._end_reason = reason
        self._notify("ended")

    def _kill_round(self) -> None:
        with self._proc_lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                try:
                    proc.terminate()
                except OSError:
                    pass

    def _notify(self, what: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(what)
            except Exception:  # a listener's bug must not stop the sampler
                log.warning("py-spy job %s: a listener failed on %r", self.pid, what, exc_info=True)


def _innermost_python(frames: Sequence[Frame]) -> Frame | None:
    return next((frame for frame in frames if not is_native(frame)), frames[0] if frames else None)


def _short(frame: Frame) -> str:
    """'Linear.forward (torch/nn/modules/linear.py:134)': the path from its package root on."""
    path = frame.file
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        path = os.path.basename(path) if os.path.isabs(path) else path
    return f"{frame.name} ({path}:{frame.line})" if frame.line else f"{frame.name} ({path})"
