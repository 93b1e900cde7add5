"""What a training thread is doing, read from its Python stack: the one classifier of the hook's sampler and py-spy.

A stack is a sequence of frames, innermost first, each with a file, a function and a line. Python frames are all
that either reader sees (C++ is invisible without py-spy --native), so a call into C++ shows as the Python line
that makes it; the rules below say which frames or source text decide each activity.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

DATA_WAIT = "data_wait"
"""Blocked on the DataLoader's workers (their queue) or its pin-memory thread."""
DATA_COLLATE = "data_collate"
"""The main process's collate_fn (num_workers=0)."""
DATA_LOAD = "data_load"
"""The main process's Dataset.__getitem__ (num_workers=0)."""
H2D = "h2d"
"""A host->device copy called from the job's line (.cuda(), .to(device), copy_)."""
SYNC = "sync"
"""Waiting for the GPU: torch.cuda.synchronize, .item(), .cpu(), .tolist(), printing or formatting a tensor."""
COMM = "comm"
"""Inside torch.distributed (collectives, barriers, DDP's communication)."""
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
ALLOC = "alloc"
"""Inside torch.cuda.empty_cache: the caching allocator handing its cache back to the driver (it waits for the GPU)."""
CPU = "cpu"
"""The job's own code, or library code it calls (numpy, PIL, ...) outside torch's model, autograd and optimizer."""
OTHER = "other"
"""No stack (the thread was not found), or only gpumon's own frames."""
ACTIVITIES = (DATA_WAIT, DATA_COLLATE, DATA_LOAD, H2D, SYNC, COMM, FORWARD, BACKWARD, OPTIMIZER, ALLOC, CPU, OTHER)
LAUNCH_ACTIVITIES = frozenset({FORWARD, BACKWARD, OPTIMIZER})
"""torch dispatching ops and launching kernels: the model, autograd and the optimizer."""
DATA_ACTIVITIES = frozenset({DATA_WAIT, DATA_COLLATE, DATA_LOAD})

SEEN_TORCH = "torch"
SEEN_SOURCE = "source"
"""How a sync or copy was recognised: a torch function on the stack, or only the source text of the job's line (the
less sure: a print() of a CPU value reads the same)."""


class StackFrame(Protocol):
    """A stack frame as `classify` reads it: its file, function and line (the hook's Frame and py-spy's alike)."""

    @property
    def file(self) -> str: ...
    @property
    def function(self) -> str: ...
    @property
    def line(self) -> int: ...


class Frame(NamedTuple):
    """A frame as the hook's sampler reads it."""

    file: str
    function: str
    line: int


SourceLine = Callable[[str, int], str]


def linecache_line(file: str, line: int) -> str:
    """The text of a source line by its absolute path (the job's files, readable by the same user); '' when unknown
    (a relative path, `<string>`, a line 0)."""
    if not file or line <= 0 or not os.path.isabs(file):
        return ""
    return linecache.getline(file, line)


SYNC_LINE = re.compile(
    r"\.(item|tolist|cpu|numpy)\(\s*\)|\.synchronize\(|\.to\(\s*['\"]cpu['\"]|\.nonzero\(|\.elapsed_time\("
    r"|(?<![.\w])(?:print|float|int|bool)\("
)
"""Calls that wait for the GPU when their tensor is on it (the builtins print(), float(), int() and bool(), not the
tensor methods .float() and .int(), which convert on the device)."""
H2D_LINE = re.compile(r"\.cuda\(|\.to\(\s*(?:['\"]cuda|device\b|dev\b|\w*device\w*\s*[,)])|non_blocking\s*=")
"""Calls that copy host tensors to the GPU (.cuda(), .to(device), .to("cuda"), anything non_blocking)."""
_SYNC_FUNCTIONS = frozenset({"synchronize", "_local_scalar_dense", "elapsed_time"})
_TENSOR_SYNC_FUNCTIONS = frozenset({"__format__", "__repr__", "__str__", "tolist", "__array__", "numpy", "item"})
_BACKWARD_FUNCTIONS = frozenset({"backward", "_engine_run_backward", "run_backward", "grad"})
_OPTIMIZER_PARTS = (
    "torch/optim/",
    "torch/amp/grad_scaler.py",
    "torch/cuda/amp/grad_scaler.py",
    "torch/nn/utils/clip_grad.py",
)
_FORWARD_PARTS = ("torch/nn/modules/", "torch/nn/parallel/", "torch/_dynamo/", "torch/_inductor/")
"""The model's forward: torch.nn.functional called straight from the job's code (a resize or blur of a batch on
the CPU) is the job's own work, not the model's; inside a module, the module's frames say forward."""


def _path(frame: StackFrame) -> str:
    return frame.file.replace("\\", "/")


def _in(frame: StackFrame, *parts: str) -> bool:
    path = _path(frame)
    return any(part in path for part in parts)


def is_native(frame: StackFrame) -> bool:
    """A C/C++ frame (py-spy --native): a shared library or no Python file."""
    return not frame.file.endswith(".py") and (".so" in frame.file or not frame.line)


def is_library(frame: StackFrame) -> bool:
    """Torch, the standard library, site-packages, gpumon, frozen or native code: not the job's own."""
    path = _path(frame)
    return (
        is_native(frame)
        or path.startswith(("torch/", "<frozen"))
        or "/site-packages/" in path
        or "/dist-packages/" in path
        or "/lib/python3" in path
        or "/torch/" in path
        or "/gpumon/hook/" in path
    )


def user_frame(frames: Sequence[StackFrame]) -> StackFrame | None:
    """The innermost frame of the job's own code (outside torch, the standard library and site-packages)."""
    return next((frame for frame in frames if not is_library(frame)), None)


def _phase(frames: Sequence[StackFrame]) -> str | None:
    """backward, optimizer or forward from the torch frames on the stack; None outside all three."""
    if any(
        frame.function in _BACKWARD_FUNCTIONS and _in(frame, "torch/autograd/", "torch/_tensor.py") for frame in frames
    ):
        return BACKWARD
    if any(_in(frame, *_OPTIMIZER_PARTS) for frame in frames):
        return OPTIMIZER
    if any(_in(frame, *_FORWARD_PARTS) or frame.function in ("_call_impl", "_wrapped_call_impl") for frame in frames):
        return FORWARD
    return None


def _data(frames: Sequence[StackFrame]) -> str | None:
    if not any(_in(frame, "torch/utils/data/") for frame in frames):
        return None
    if any(_in(frame, "torch/utils/data/_utils/collate.py") for frame in frames):
        return DATA_COLLATE
    if any(_in(frame, "torch/utils/data/_utils/fetch.py") for frame in frames):
        return DATA_LOAD
    return DATA_WAIT


def classify(
    frames: Sequence[StackFrame], source_line: SourceLine, native_sync: bool = False
) -> tuple[str, str | None]:
    """(activity, how a sync or copy was seen) of one stack, innermost frame first.

    In order: any frame in torch/utils/data is the DataLoader (collate_fn, the main process's Dataset, or else the
    wait for its workers); a frame in torch.cuda.empty_cache is the allocator (alloc: its wait for the GPU too);
    `native_sync` (py-spy --native saw a CUDA wait function) is a sync; any frame in torch/distributed is
    communication; an innermost torch sync function (synchronize, a tensor's formatting or tolist) is a sync; an
    innermost line of the job whose source text syncs (.item(), .cpu(), print(...)) or copies to the GPU (.cuda(),
    .to(device)) is that; then backward (autograd), the optimizer (torch/optim, GradScaler, gradient clipping),
    forward (torch.nn modules, compiled code); then a job's line with such a sync call, below which only library
    code runs, is a sync too; anything else in the job's code is its own CPU work.
    """
    if not frames:
        return OTHER, None
    data = _data(frames)
    if data is not None:
        return data, None
    if any(frame.function == "empty_cache" and _in(frame, "torch/cuda/memory.py") for frame in frames):
        return ALLOC, None
    if native_sync:
        return SYNC, None
    if any(_in(frame, "torch/distributed/") for frame in frames):
        return COMM, None
    # gpumon's own wrappers (the step budget's timing of .to() and .item(), the DataLoader's) are transparent: the
    # job's line that called through them is what runs.
    python_frames = [frame for frame in frames if not is_native(frame) and not _in(frame, "/gpumon/hook/")]
    if not python_frames:
        return OTHER, None
    innermost = python_frames[0]
    if innermost.function in _SYNC_FUNCTIONS and _in(innermost, "torch/"):
        return SYNC, SEEN_TORCH
    if innermost.function in _TENSOR_SYNC_FUNCTIONS and _in(innermost, "torch/_tensor.py", "torch/_tensor_str.py"):
        return SYNC, SEEN_TORCH
    text = source_line(innermost.file, innermost.line) or ""
    if SYNC_LINE.search(text):
        return SYNC, SEEN_SOURCE
    if not is_library(innermost) and H2D_LINE.search(text):
        return H2D, SEEN_SOURCE
    phase = _phase(python_frames)
    if phase is not None:
        return phase, None
    own = user_frame(python_frames)
    if own is None:
        return CPU, None
    if own is not innermost and SYNC_LINE.search(source_line(own.file, own.line) or ""):
        return SYNC, SEEN_SOURCE
    return CPU, None
