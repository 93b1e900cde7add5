"""The py-spy estimate's categories: a main-thread stack classified by gpumon.protocol.activity (the classifier the
hook's own sampler uses too), its activities grouped, with how a CUDA sync was recognised."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from gpumon.jobs.procfs import process_argv
from gpumon.jobs.pyspy.stacks import Frame, ThreadStack, main_thread_stacks
from gpumon.protocol import activity

DATA_WAIT = "data_wait"
CUDA_SYNC = "cuda_sync"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
COMM = "comm"
H2D = "h2d"
ALLOC = "alloc"
USER_CODE = "user_code"
ELSEWHERE = "elsewhere"
CATEGORIES = (DATA_WAIT, CUDA_SYNC, FORWARD, BACKWARD, OPTIMIZER, COMM, H2D, ALLOC, USER_CODE, ELSEWHERE)
LABELS = {
    DATA_WAIT: "waiting on DataLoader",
    CUDA_SYNC: "CUDA sync",
    FORWARD: "forward",
    BACKWARD: "backward",
    OPTIMIZER: "optimizer step",
    COMM: "torch.distributed",
    H2D: "host->device copy",
    ALLOC: "torch.cuda.empty_cache",
    USER_CODE: "the job's own code",
    ELSEWHERE: "elsewhere",
}
METHOD_LABEL = "estimate (py-spy, no hook)"

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
    activity.ALLOC: ALLOC,
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


def classify(
    stacks: Iterable[ThreadStack], pid: int | None = None, source_line: SourceLine = linecache_line
) -> Counter[str]:
    """Sample counts per category over the main thread's stacks."""
    counts: Counter[str] = Counter()
    for stack in main_thread_stacks(stacks, pid):
        counts[classify_stack(stack.frames, source_line)] += stack.count
    return counts


def fractions(counts: Mapping[str, int]) -> dict[str, float]:
    """Each category's share of `counts` (every category, 0 where none)."""
    total = sum(counts.values())
    return {category: (counts.get(category, 0) / total if total else 0.0) for category in CATEGORIES}
