"""The hook <-> monitor protocol: versioned newline-delimited JSON over a per-user Unix socket.

Imported by both sides (the in-process hook and the monitor's attach layer), so it is stdlib only.
docs/protocol.md is the reference; the TypedDicts below are the field lists in code.

Rules that keep the versions compatible:
- PROTOCOL_VERSION changes only for a breaking change (a field removed, renamed or re-typed, a
  meaning changed). New fields and new message types are added without a bump.
- Receivers ignore fields they do not know. A client ignores message types it does not know; the
  hook answers a request type it does not know with an `error` (code `unknown_type`).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import time
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict, Union

PROTOCOL_VERSION = 1

MAX_LINE = 64 * 1024
"""Longest request line (client -> hook) in bytes, newline included. Longer: error and close."""
MAX_MESSAGE = 1024 * 1024
"""Longest message line (hook -> client) a client needs to accept, in bytes."""

SOCKET_DIR_ENV = "GPUMON_SOCKET_DIR"
"""Overrides the socket directory on both sides (tests, unusual setups). Same safety checks apply."""
HOOK_ENV = "GPUMON_HOOK"
""""0" (or false/off/no) disables the hook in a process; `gpumon run` sets "1"."""
INJECTED_ENV = "GPUMON_HOOK_INJECTED"
"""Set by `gpumon run`: the hook then starts its server only at the first sign of training."""
KNOBS_ENV = "GPUMON_KNOBS"
"""A JSON object of knobs (KNOBS below) the hook applies at install: how trial runs change a knob."""
GPU_TIMING_ENV = "GPUMON_HOOK_GPU_TIMING"
"""N: time every Nth step with CUDA events (and every step slower than 20 ms); 0: no GPU timing.
Default 8."""
INJECT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hook", "inject")
"""Holds the sitecustomize.py that `gpumon run` puts first on PYTHONPATH."""

# Hook -> client.
HELLO = "hello"
STEPS = "steps"
STATE = "state"
PONG = "pong"
SUBSCRIBED = "subscribed"
DIAGNOSING = "diagnosing"
DIAGNOSIS = "diagnosis"
KNOB_ACK = "knob_ack"
ERROR = "error"
BYE = "bye"
SERVER_TYPES = frozenset({HELLO, STEPS, STATE, PONG, SUBSCRIBED, DIAGNOSING, DIAGNOSIS, KNOB_ACK, ERROR, BYE})

# Client -> hook.
PING = "ping"
SUBSCRIBE = "subscribe"
GET_STATE = "get_state"
DIAGNOSE = "diagnose"
SET_KNOB = "set_knob"
REQUEST_TYPES = frozenset({PING, SUBSCRIBE, GET_STATE, DIAGNOSE, SET_KNOB})

# `error` codes.
E_BAD_JSON = "bad_json"
E_BAD_MESSAGE = "bad_message"
E_UNKNOWN_TYPE = "unknown_type"
E_LINE_TOO_LONG = "line_too_long"
E_TOO_MANY_CLIENTS = "too_many_clients"
E_BAD_KNOB = "bad_knob"
E_BUSY = "busy"
E_TOO_MANY_ERRORS = "too_many_errors"

# Where a step boundary came from (StepRecord.source).
SOURCE_OPTIMIZER = "optimizer"
SOURCE_BACKWARD = "backward"
SOURCE_DATALOADER = "dataloader"
SOURCE_MANUAL = "manual"
STEP_SOURCES = (SOURCE_OPTIMIZER, SOURCE_BACKWARD, SOURCE_DATALOADER, SOURCE_MANUAL)

DIAGNOSE_MAX_STEPS = 10_000
BACKLOG_MAX = 4096


class ProtocolError(ValueError):
    """A line that is not a valid protocol message, or a peer that does not speak this version."""

    def __init__(self, message: str, code: str = E_BAD_MESSAGE) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------------
# Message shapes. `total=False` fields may be absent; every message has `type`.


class CudaDevice(TypedDict, total=False):
    index: int
    name: str
    uuid: str | None  # "GPU-xxxxxxxx-...", as nvidia-smi and NVML print it
    total_memory: int  # bytes
    capability: list[int]  # [major, minor]


class CudaInfo(TypedDict, total=False):
    initialized: bool  # False until the job itself touches CUDA; the hook never initializes it
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES as the job sees it
    torch_cuda: str | None  # torch.version.cuda
    device: int | None  # the device the job's steps run on (optimizer params, else current device)
    devices: list[CudaDevice]  # empty while not initialized


class DistInfo(TypedDict, total=False):
    rank: int | None
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    group_rank: int | None
    run_id: str | None  # TORCHELASTIC_RUN_ID
    master_addr: str | None
    master_port: str | None
    initialized: bool  # torch.distributed.is_initialized()
    backend: str | None


class Hello(TypedDict, total=False):
    type: str
    protocol: int
    pid: int
    ppid: int
    uid: int
    hostname: str
    argv: list[str]
    cwd: str
    executable: str
    python: str
    torch: str | None
    hook_version: str
    started: float  # unix time the hook was installed
    injected: bool  # True when installed by `gpumon run` (environment injection)
    cuda: CudaInfo
    dist: DistInfo


class StepRecord(TypedDict, total=False):
    seq: int  # 1, 2, 3, ... per process; consecutive
    t: float  # unix time at the end of the step
    wall_ms: float  # time since the previous step boundary
    data_ms: float  # time blocked in DataLoader __next__ during the step
    gpu_ms: float | None  # GPU time between the step's start and end events; None: not measured
    samples: int | None  # batch size(s) fetched during the step; None: unknown
    syncs: int  # host-device synchronizations; present only inside a diagnosis window
    source: str  # one of STEP_SOURCES


class StepStats(TypedDict, total=False):
    window_s: float  # the span the rates are computed over (at most STATS_WINDOW_S)
    steps: int  # steps in the window
    steps_per_s: float | None
    samples_per_s: float | None
    wall_ms: float | None  # mean over the window
    data_ms: float | None
    gpu_ms: float | None  # mean over steps that have it
    data_fraction: float | None  # sum(data) / sum(wall)
    gpu_fraction: float | None  # sum(gpu) / sum(wall), over steps that have gpu_ms


class Steps(TypedDict, total=False):
    type: str
    t: float
    last_seq: int  # all records up to this seq have now been sent to this client (0: no step yet)
    records: list[StepRecord]  # new since the previous `steps` to this client, oldest first, at most 256
    dropped: int  # records this client missed (overflow); rates in `stats` still count them
    stats: StepStats


class DataLoaderInfo(TypedDict, total=False):
    id: int  # id() of the DataLoader object, stable while it lives
    dataset: str  # the dataset's class name
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None
    persistent_workers: bool
    drop_last: bool
    worker_pids: list[int]
    batches: int  # batches fetched through it
    wait_ms: float  # total time blocked in its __next__
    last_used: float  # unix time


class MemoryInfo(TypedDict, total=False):
    device: int
    allocated: int  # bytes, torch.cuda.memory_allocated
    reserved: int  # torch.cuda.memory_reserved
    max_allocated: int  # torch.cuda.max_memory_allocated
    alloc_retries: int  # cudaMalloc retries after freeing the cache (memory pressure)
    ooms: int
    total: int | None  # device memory, bytes


class AutocastInfo(TypedDict, total=False):
    device_type: str
    dtype: str  # "torch.bfloat16"
    enabled: bool
    entered: int  # times an autocast context was entered
    last_t: float  # unix time of the last entry


class PrecisionInfo(TypedDict, total=False):
    autocast: AutocastInfo | None  # None: no autocast context seen
    tf32_matmul: bool  # torch.backends.cuda.matmul.allow_tf32
    tf32_cudnn: bool  # torch.backends.cudnn.allow_tf32
    float32_matmul_precision: str  # torch.get_float32_matmul_precision()
    cudnn_benchmark: bool
    cudnn_deterministic: bool


class KnobState(TypedDict, total=False):
    applied: dict[str, Any]  # knobs in effect, by name
    pending: dict[str, Any]  # accepted, not yet applied (waiting for a step boundary)
    errors: list[str]  # e.g. a bad GPUMON_KNOBS
    ignored: list[str]  # GPUMON_KNOBS names the hook does not know, left to the script (e.g. amp_bf16)


class DiagnosisState(TypedDict, total=False):
    active: bool
    steps_left: int


class HookInfo(TypedDict, total=False):
    errors: int  # exceptions inside the hook, swallowed
    last_error: str | None
    clients: int
    installed_at: float


class State(TypedDict, total=False):
    type: str
    t: float
    last_seq: int
    step_source: str | None  # which signal marks steps now (one of STEP_SOURCES), None: no step yet
    dataloaders: list[DataLoaderInfo]  # most recently used first
    memory: MemoryInfo | None  # None while CUDA is not initialized
    precision: PrecisionInfo
    cuda: CudaInfo
    knobs: KnobState
    diagnosis: DiagnosisState
    hook: HookInfo


class SyncSite(TypedDict):
    file: str
    line: int
    count: int


class Diagnosis(TypedDict, total=False):
    type: str
    id: Any  # the `id` of the diagnose request that asked for it
    available: bool  # False: could not count (reason says why); the other fields then absent
    reason: str
    steps: int
    syncs_total: int
    syncs_per_step: list[int]
    sites: list[SyncSite]  # where the syncs were called from, most frequent first (at most 20)


class Error(TypedDict, total=False):
    type: str
    id: Any
    code: str
    message: str


class Bye(TypedDict, total=False):
    type: str
    t: float
    last_seq: int
    reason: str  # "exit"


class SubscribeRequest(TypedDict, total=False):
    type: str
    id: Any
    steps: bool  # stream `steps` (default true)
    state: bool  # stream `state` (default true)
    steps_interval: float  # seconds, clamped to [0.05, 5], default 0.2
    state_interval: float  # seconds, clamped to [0.25, 30], default 1
    backlog: int  # resend up to this many of the latest records now (0..BACKLOG_MAX)


class DiagnoseRequest(TypedDict, total=False):
    type: str
    id: Any
    steps: int  # 1..DIAGNOSE_MAX_STEPS


class SetKnobRequest(TypedDict, total=False):
    type: str
    id: Any
    knobs: dict[str, Any]


Message = Mapping[str, Any]

# ---------------------------------------------------------------------------------------------
# Knobs: what `set_knob` (live) and GPUMON_KNOBS (trial runs) may change.


class KnobSpec(TypedDict):
    kind: str  # "bool" | "int" | "optional_int" | "choice"
    live: bool  # settable on a running job with set_knob
    applies: str  # "next_step" | "next_dataloader_iter"
    choices: tuple[str, ...]
    min: int
    max: int
    doc: str


APPLIES_NEXT_STEP = "next_step"
APPLIES_NEXT_DATALOADER_ITER = "next_dataloader_iter"

KNOBS: dict[str, KnobSpec] = {
    "cudnn_benchmark": KnobSpec(kind="bool", live=True, applies=APPLIES_NEXT_STEP, choices=(), min=0, max=0,
                                doc="torch.backends.cudnn.benchmark"),
    "num_workers": KnobSpec(kind="int", live=True, applies=APPLIES_NEXT_DATALOADER_ITER, choices=(), min=0,
                            max=256, doc="DataLoader.num_workers, for every DataLoader of the job"),
    "pin_memory": KnobSpec(kind="bool", live=True, applies=APPLIES_NEXT_DATALOADER_ITER, choices=(), min=0,
                           max=0, doc="DataLoader.pin_memory"),
    "prefetch_factor": KnobSpec(kind="optional_int", live=True, applies=APPLIES_NEXT_DATALOADER_ITER, choices=(),
                                min=1, max=64, doc="DataLoader.prefetch_factor (batches per worker in flight)"),
    "persistent_workers": KnobSpec(kind="bool", live=True, applies=APPLIES_NEXT_DATALOADER_ITER, choices=(),
                                   min=0, max=0, doc="DataLoader.persistent_workers"),
    "tf32": KnobSpec(kind="bool", live=False, applies=APPLIES_NEXT_STEP, choices=(), min=0, max=0,
                     doc="torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 (numerics: "
                         "trial runs only)"),
    "float32_matmul_precision": KnobSpec(kind="choice", live=False, applies=APPLIES_NEXT_STEP,
                                         choices=("highest", "high", "medium"), min=0, max=0,
                                         doc="torch.set_float32_matmul_precision (numerics: trial runs only)"),
}


def validate_knobs(knobs: object, *, live: bool) -> dict[str, Any]:
    """Check a knob object (set_knob's `knobs` or GPUMON_KNOBS); return it as a dict or raise ProtocolError.

    With live=True, knobs that change numerics are refused (they need a trial run).
    """
    if not isinstance(knobs, Mapping) or not knobs:
        raise ProtocolError("knobs must be a non-empty JSON object", E_BAD_KNOB)
    checked: dict[str, Any] = {}
    for name, value in knobs.items():
        spec = KNOBS.get(name) if isinstance(name, str) else None
        if spec is None:
            raise ProtocolError(f"unknown knob {name!r} (known: {', '.join(sorted(KNOBS))})", E_BAD_KNOB)
        if live and not spec["live"]:
            raise ProtocolError(f"knob {name!r} changes numerics: use a trial run (GPUMON_KNOBS)", E_BAD_KNOB)
        kind = spec["kind"]
        if kind == "bool":
            ok = isinstance(value, bool)
        elif kind == "choice":
            ok = isinstance(value, str) and value in spec["choices"]
        else:
            ok = (_is_int(value) and spec["min"] <= value <= spec["max"]) or (kind == "optional_int" and value is None)
        if not ok:
            raise ProtocolError(f"bad value {value!r} for knob {name!r} ({_describe_knob(spec)})", E_BAD_KNOB)
        checked[name] = value
    return checked


def _describe_knob(spec: KnobSpec) -> str:
    kind = spec["kind"]
    if kind == "bool":
        return "true or false"
    if kind == "choice":
        return "one of " + ", ".join(spec["choices"])
    text = f"an integer {spec['min']}..{spec['max']}"
    return text + " or null" if kind == "optional_int" else text


# ---------------------------------------------------------------------------------------------
# Encoding and validation.

_NUMBER = (int, float)
_FieldTypes = Union[type, tuple[type, ...]]

# type -> (required fields, optional fields). Types are checked; unknown fields are allowed.
_SCHEMAS: dict[str, tuple[dict[str, _FieldTypes], dict[str, _FieldTypes]]] = {
    PING: ({}, {}),
    GET_STATE: ({}, {}),
    SUBSCRIBE: ({}, {"steps": bool, "state": bool, "steps_interval": _NUMBER, "state_interval": _NUMBER,
                     "backlog": int}),
    DIAGNOSE: ({"steps": int}, {}),
    SET_KNOB: ({"knobs": dict}, {}),
    HELLO: ({"protocol": int, "pid": int}, {"argv": list, "cwd": str, "cuda": dict, "dist": dict}),
    STEPS: ({"records": list}, {"stats": dict, "dropped": int, "last_seq": int}),
    STATE: ({}, {"dataloaders": list, "precision": dict, "cuda": dict, "knobs": dict}),
    PONG: ({}, {}),
    SUBSCRIBED: ({}, {}),
    DIAGNOSING: ({"steps": int}, {}),
    DIAGNOSIS: ({"available": bool}, {"syncs_per_step": list, "sites": list}),
    KNOB_ACK: ({"knobs": dict}, {"applies": dict}),
    ERROR: ({"code": str, "message": str}, {}),
    BYE: ({}, {}),
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_ok(value: object, expected: _FieldTypes) -> bool:
    if isinstance(value, bool) and expected is not bool and not (isinstance(expected, tuple) and bool in expected):
        return False  # JSON true is not a number here
    return isinstance(value, expected)


def encode(msg: Message) -> bytes:
    """One message as a compact JSON line ending in a newline. NaN/inf are refused (not JSON)."""
    if not isinstance(msg.get("type"), str):
        raise ProtocolError("a message needs a string 'type'")
    try:
        text = json.dumps(msg, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {msg.get('type')!r} message: {exc}") from exc
    return text.encode("utf-8") + b"\n"


def decode(line: bytes | str, *, limit: int = MAX_MESSAGE) -> dict[str, Any]:
    """Parse and check one line; return the message dict or raise ProtocolError (with an error code).

    A known type's fields are checked; an unknown type passes (a client ignores it, the hook answers
    it with `unknown_type`). `limit` is the longest line accepted, in bytes.
    """
    raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
    if len(raw) > limit:
        raise ProtocolError(f"line of {len(raw)} bytes is longer than {limit}", E_LINE_TOO_LONG)
    try:
        msg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"not JSON: {exc}", E_BAD_JSON) from exc
    if not isinstance(msg, dict):
        raise ProtocolError("a message must be a JSON object")
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("a message needs a string 'type'")
    schema = _SCHEMAS.get(kind)
    if schema is None:
        return msg
    required, optional = schema
    for name, expected in required.items():
        if name not in msg:
            raise ProtocolError(f"{kind!r} needs field {name!r}")
        if not _type_ok(msg[name], expected):
            raise ProtocolError(f"{kind!r} field {name!r} has the wrong type")
    for name, expected in optional.items():
        if name in msg and not _type_ok(msg[name], expected):
            raise ProtocolError(f"{kind!r} field {name!r} has the wrong type")
    return msg


def error_message(code: str, message: str, request_id: Any = None) -> Error:
    msg = Error(type=ERROR, code=code, message=message)
    if request_id is not None:
        msg["id"] = request_id
    return msg


# ---------------------------------------------------------------------------------------------
# Where sockets live, and their safety checks.


def socket_dir(uid: int | None = None) -> str:
    """The directory the hook of a job of `uid` (default: ours) puts its socket in.

    GPUMON_SOCKET_DIR if set; else $XDG_RUNTIME_DIR/gpumon (for our own uid, when that variable is
    set); else /tmp/gpumon-<uid>.
    """
    override = os.environ.get(SOCKET_DIR_ENV)
    if override:
        return override
    own = os.getuid()
    uid = own if uid is None else uid
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if uid == own and runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "gpumon")
    return f"/tmp/gpumon-{uid}"


def candidate_socket_dirs(uid: int | None = None) -> list[str]:
    """Every directory a job of `uid` may have used (its environment may differ from the monitor's)."""
    uid = os.getuid() if uid is None else uid
    dirs = [socket_dir(uid)]
    if not os.environ.get(SOCKET_DIR_ENV):
        dirs += [f"/run/user/{uid}/gpumon", f"/tmp/gpumon-{uid}"]
    return list(dict.fromkeys(dirs))


def socket_path(pid: int, uid: int | None = None) -> str:
    return os.path.join(socket_dir(uid), f"{pid}.sock")


def pid_from_socket_path(path: str) -> int | None:
    name = os.path.basename(path)
    if not name.endswith(".sock"):
        return None
    stem = name[: -len(".sock")]
    return int(stem) if stem.isdigit() else None


def unsafe_dir_reason(path: str, uid: int | None = None) -> str | None:
    """Why `path` must not be used as a socket directory of `uid`, or None when it is safe.

    Safe: a real directory (not a symlink), owned by `uid`, with no access for group or others.
    """
    uid = os.getuid() if uid is None else uid
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_sockets(uid: int | None = None) -> list[tuple[int, str]]:
    """(pid, path) of each hook socket found in the safe candidate directories, sorted by pid."""
    found: dict[int, str] = {}
    for directory in candidate_socket_dirs(uid):
        if unsafe_dir_reason(directory, uid) is not None:
            continue
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            pid = pid_from_socket_path(path)
            if pid is None or pid in found:
                continue
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    found[pid] = path
            except OSError:
                continue
    return sorted(found.items())


def is_stale(path: str) -> bool:
    """True when nobody serves `path`: its pid is dead, or a connection is refused (pid reused)."""
    pid = pid_from_socket_path(path)
    if pid is not None and not pid_alive(pid):
        return True
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def remove_stale_sockets(uid: int | None = None) -> list[str]:
    """Remove the sockets of jobs that are gone (the monitor's job; the hook removes its own at exit)."""
    removed = []
    for _pid, path in list_sockets(uid):
        if is_stale(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def injection_env(base_env: Mapping[str, str], knobs: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment for `gpumon run -- CMD`: every Python process started with it installs the hook
    (through INJECT_DIR/sitecustomize.py, which then runs any other sitecustomize), lazily.

    knobs: for a trial run, passed as GPUMON_KNOBS. The hook's knobs (KNOBS) are checked with
    validate_knobs(live=False); other names pass through for a script that reads GPUMON_KNOBS itself
    (the hook reports them in state.knobs.ignored).
    Lives here, not in gpumon.hook, because importing gpumon.hook installs the hook in the importer.
    """
    env = dict(base_env)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != INJECT_DIR]
    env["PYTHONPATH"] = os.pathsep.join([INJECT_DIR, *parts])
    env[HOOK_ENV] = "1"
    env[INJECTED_ENV] = "1"
    if knobs:
        ours = {name: value for name, value in knobs.items() if name in KNOBS}
        checked = {**dict(knobs), **(validate_knobs(ours, live=False) if ours else {})}
        env[KNOBS_ENV] = json.dumps(checked, separators=(",", ":"))
    else:
        env.pop(KNOBS_ENV, None)
    return env


_UCRED = struct.Struct("3i")


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return pid, uid, gid


def peer_allowed(peer_uid: int, own_uid: int | None = None) -> bool:
    """The hook talks to its own user and to root, nobody else."""
    own_uid = os.getuid() if own_uid is None else own_uid
    return peer_uid == own_uid or peer_uid == 0
