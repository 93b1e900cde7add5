"""PySpySampler, the fallback for jobs without the hook: py-spy samples the main thread, in rounds, on a thread.

py-spy (`pip install py-spy`) runs in rounds of `py-spy record --format raw --idle --threads --nonblocking`
(the job is never paused; with --native it is, at each sample: py-spy refuses --native with --nonblocking); each
main-thread stack is put in one category: waiting on the DataLoader, CUDA sync, forward, backward, optimizer step,
or elsewhere. The result is an ESTIMATE from stack samples.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence

from gpumon import protocol
from gpumon.jobs.listener import Listener
from gpumon.jobs.procfs import process_command
from gpumon.jobs.pyspy.categories import (
    CUDA_SYNC,
    USER_CODE,
    SourceLine,
    classify_stack_how,
    fractions,
    is_native,
    job_source,
    user_frame,
)
from gpumon.jobs.pyspy.estimate import RATE, RECENT_ROUNDS, ROUND_S, TIMELINE_ROUNDS, EstimateView
from gpumon.jobs.pyspy.stacks import Frame, ThreadStack, main_thread_stacks, parse_raw
from gpumon.jobs.pyspy.target import (
    MISSING_HELP,
    PROBE_ATTEMPTS,
    PROBE_TIMEOUT,
    explain_pyspy_failure,
    find_pyspy,
    probe,
    quiet_env,
)

log = logging.getLogger(__name__)


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
        """Call `listener` with what changed, on the sampler's thread."""
        self._listeners.append(listener)

    def start(self, listener: Listener | None = None) -> None:
        """Start sampling in rounds on a daemon thread (`listener`: added first)."""
        if listener is not None:
            self.add_listener(listener)
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"gpumon-pyspy-{self.pid}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop sampling: end the running round, join the thread, remove the work directory."""
        self._stop.set()
        self._kill_round()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def ended(self) -> bool:
        """Whether the job has ended (or py-spy can no longer sample it)."""
        return self._ended

    @property
    def primary(self) -> None:
        """No hook client: py-spy only reads the job's stacks (JobSource.primary)."""
        return None

    def view(self) -> EstimateView:
        """A frozen copy of the estimate so far."""
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
                    command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=quiet_env()
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
