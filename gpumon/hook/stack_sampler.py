"""The hook's stack sampler: what the training thread is doing, and whether its GPU has work queued, N times a second.

Its own daemon thread reads the training thread's Python stack (`sys._current_frames()`), classifies it with
gpumon.protocol.activity (the rules py-spy's estimate uses), and asks the training stream whether it still has work
(`Stream.query()`, which never waits). Each sample is counted under its activity as GPU idle, GPU busy or unknown,
and under the job's line. The training thread does nothing for it; the sampler holds the GIL for the few
microseconds a sample takes.

A CUDA graph capture in the default (global) mode forbids stream queries from any other thread, so the sampler
stops reading the GPU's state for good once the job begins a capture (`CUDAGraph.capture_begin` is wrapped: the
wrapper waits for a query in flight, a few microseconds at most, and then none follows).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from gpumon import protocol
from gpumon.protocol import activity

SAMPLE_HZ = 20
"""Samples a second by default: over a 20 s diagnosis, 400 samples put a share within about 2.5 points."""
MAX_HZ = 200
MAX_DEPTH = 64
"""Frames read from the innermost out (a deeper stack keeps its innermost 64)."""
MAX_LINES = 512
"""Distinct lines counted; further ones go under one catch-all line."""
MAX_STACKS = 512
"""Distinct stacks whose classification is kept (a training loop repeats a few; the cache starts over when full): a
repeated stack costs the walk and a lookup, not the classifier's passes over its frames."""
SAMPLED_LINES_SENT = 16
IDLE, BUSY, UNKNOWN = range(3)
OTHER_LINES = ("(other lines)", 0, "", activity.OTHER)
_OWN_LINE_ACTIVITIES = frozenset({activity.SYNC, activity.H2D, activity.ALLOC, activity.CPU})
"""Activities counted at the job's own line that called into torch or a library, not at the innermost frame."""
_MARKED_OVER = frozenset({activity.CPU, activity.OTHER})
"""Activities read from a stack that the budget's mark (BudgetMeter.inside) replaces: the job's own code, where only
the source text could tell a copy or a sync."""

GPU_NOT_YET = "CUDA is not initialized yet"
GPU_GRAPHS = "CUDA graphs in use: their capture forbids stream queries from other threads"
GPU_NO_CUDA = "this torch has no CUDA"


class StackSampler:
    """Counts of the training thread's activities by the GPU's state, and of its lines; `result()` for the state."""

    def __init__(self, runtime: Any, torch: Any, hz: float = SAMPLE_HZ) -> None:
        self._runtime = runtime
        self._torch = torch
        self.hz = max(0.1, min(float(hz), MAX_HZ))
        self.samples = 0
        self._counts: dict[str, list[int]] = {name: [0, 0, 0] for name in activity.ACTIVITIES}
        self._lines: dict[tuple[str, int, str, str], list[int]] = {}
        self._stacks: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[str, tuple[str, int, str, str], Any]] = {}
        self._lock = threading.Lock()
        """Guards the counts against the server thread reading them."""
        self._query_lock = threading.Lock()
        self._graphs = False
        self._stopped = False
        self._graph_patch: tuple[Any, Any, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_s = 0.0
        self.gpu_state: str | None = GPU_NOT_YET
        version = getattr(torch, "version", None)
        if version is not None and not (getattr(version, "cuda", None) or getattr(version, "hip", None)):
            self.gpu_state = GPU_NO_CUDA

    # -- the thread -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sampler thread (once), guarding CUDA graph captures first."""
        if self._thread is not None:
            return
        self._guard_graphs()
        self._thread = threading.Thread(target=self._run, name="gpumon-hook-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread (not waited for; no stream query follows once this returns) and take the graph guard off."""
        self._stop.set()
        with self._query_lock:
            self._stopped = True
        self._unguard_graphs()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` s for the stopped thread to end (it ends within one sample)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def forget_in_child(self) -> None:
        """In a forked child: no thread runs here, and none may start. The locks are new ones: the fork may have
        copied one held by the parent's sampler thread, which does not exist here to release it."""
        self._lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._stopped = True
        self._stop.set()
        self._thread = None

    def _run(self) -> None:
        period = 1.0 / self.hz
        clock = time.thread_time
        while not self._stop.wait(period):
            started = clock()
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001 - counted, never raised; the sampler goes on
                self._runtime.error(exc)
            self._cpu_s += clock() - started

    # -- one sample -----------------------------------------------------------------------------

    def sample_once(self) -> None:
        """Read the training thread's stack once, classify it, and count it by GPU state."""
        thread = self._runtime.training_thread
        if not thread:
            return
        frame = sys._current_frames().get(thread)
        codes: list[Any] = []
        lines: list[int] = []
        while frame is not None and len(codes) < MAX_DEPTH:
            codes.append(frame.f_code)
            lines.append(frame.f_lineno or 0)  # None where the instruction has no line (generated code)
            frame = frame.f_back
        del frame
        stack = (tuple(map(id, codes)), tuple(lines))
        known = self._stacks.get(stack)
        if known is None:
            known = self._stacks[stack] = self._classify(codes, lines)
            if len(self._stacks) > MAX_STACKS:
                self._stacks.clear()
        kind, key, _codes = known
        inside = getattr(getattr(self._runtime, "budget", None), "inside", None)
        if inside is not None and kind in _MARKED_OVER:
            # The hook's timing wrapper says what the job's line is doing (a copy across devices, a sync).
            kind, key = inside, (*key[:3], inside)
        state = self._gpu_state()
        with self._lock:
            self.samples += 1
            self._counts[kind][state] += 1
            counts = self._lines.get(key)
            if counts is None:
                if len(self._lines) >= MAX_LINES:
                    key = OTHER_LINES
                counts = self._lines.setdefault(key, [0, 0, 0])
            counts[state] += 1

    @staticmethod
    def _classify(codes: list[Any], lines: list[int]) -> tuple[str, tuple[str, int, str, str], tuple[Any, ...]]:
        """(activity, the line counted, the stack's code objects: kept so that their ids, the cache's key, are not
        reused while the entry lives) of one stack, read as py-spy's estimate reads its stacks."""
        frames = [
            activity.Frame(code.co_filename, getattr(code, "co_qualname", code.co_name), line)
            for code, line in zip(codes, lines, strict=True)
        ]
        kind, _how = activity.classify(frames, activity.linecache_line)
        own = activity.user_frame(frames) if kind in _OWN_LINE_ACTIVITIES else None
        where = own or (frames[0] if frames else None)
        key = (where.file, where.line, where.function, kind) if where is not None else OTHER_LINES
        return kind, key, tuple(codes)

    def _gpu_state(self) -> int:
        """IDLE when the training stream has nothing queued, BUSY when it has, UNKNOWN where that cannot be read."""
        if self.gpu_state not in (None, GPU_NOT_YET):
            return UNKNOWN
        runtime = self._runtime
        device = runtime.cuda_device
        cuda = self._torch.cuda
        if device is None or not cuda.is_initialized():
            return UNKNOWN
        timer = runtime.gpu
        stream = timer.stream if timer is not None else None
        with self._query_lock:
            if self._stopped:
                return UNKNOWN
            if self._graphs:
                self.gpu_state = GPU_GRAPHS
                return UNKNOWN
            if stream is None:
                stream = cuda.default_stream(device)
            done = stream.query()
        self.gpu_state = None
        return IDLE if done else BUSY

    def stream_idle_now(self) -> bool | None:
        """Whether the training stream has nothing queued, asked from any thread (the collector's callback): never
        waits for the query lock, which the thread asking may itself hold; None where it cannot be told."""
        runtime = self._runtime
        device = runtime.cuda_device
        cuda = self._torch.cuda
        if device is None or not cuda.is_initialized():
            return None
        if not self._query_lock.acquire(blocking=False):
            return None
        try:
            if self._stopped or self._graphs:
                return None
            timer = runtime.gpu
            stream = timer.stream if timer is not None else None
            return bool((stream if stream is not None else cuda.default_stream(device)).query())
        finally:
            self._query_lock.release()

    # -- CUDA graphs ----------------------------------------------------------------------------

    def _guard_graphs(self) -> None:
        graph_class = getattr(getattr(getattr(self._torch, "cuda", None), "graphs", None), "CUDAGraph", None)
        original = getattr(graph_class, "capture_begin", None)
        if graph_class is None or original is None:
            return
        sampler = self

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            with sampler._query_lock:
                sampler._graphs = True
            return original(graph, *args, **kwargs)

        graph_class.capture_begin = capture_begin
        self._graph_patch = (graph_class, original, capture_begin)

    def _unguard_graphs(self) -> None:
        patch, self._graph_patch = self._graph_patch, None
        if patch is None:
            return
        graph_class, original, ours = patch
        try:
            if graph_class.__dict__.get("capture_begin") is ours:
                graph_class.capture_begin = original
        except Exception as exc:  # noqa: BLE001
            self._runtime.error(exc)

    # -- what the state message carries ---------------------------------------------------------

    def result(self) -> protocol.HostSamples:
        """The counts so far as the state's `host` (the lines with the most samples, most first)."""
        with self._lock:
            counts = {name: list(values) for name, values in self._counts.items() if any(values)}
            lines = sorted(self._lines.items(), key=_most_idle_first)[:SAMPLED_LINES_SENT]
            samples = self.samples
        return protocol.HostSamples(
            hz=self.hz,
            samples=samples,
            gpu_state=self.gpu_state,
            activities=counts,
            lines=[
                protocol.SampledLine(file=file, line=line, function=function, activity=kind, counts=list(values))
                for (file, line, function, kind), values in lines
            ],
            cost_ms=round(self._cpu_s * 1e3, 3),
        )


def _most_idle_first(item: tuple[Any, list[int]]) -> tuple[int, int]:
    counts = item[1]
    return -(counts[IDLE] + counts[UNKNOWN]), -counts[BUSY]


def make_sampler(runtime: Any, torch: Any, hz: int) -> StackSampler | None:
    """The sampler at `hz` samples a second, None for 0."""
    return StackSampler(runtime, torch, hz) if hz > 0 else None
