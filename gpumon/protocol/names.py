"""Protocol constants: the version, environment variable names, message types, error codes, and ProtocolError."""

from __future__ import annotations

PROTOCOL_VERSION = 1

SOCKET_DIR_ENV = "GPUMON_SOCKET_DIR"
"""Overrides the socket directory on both sides (tests, `gpumon run`'s private directory). Same safety checks apply."""
HOOK_ENV = "GPUMON_HOOK"
""""0" (or false/off/no) disables the hook in a process; `gpumon run` sets "1"."""
INJECTED_ENV = "GPUMON_HOOK_INJECTED"
"""Set by `gpumon run`: the hook then starts its server only at the first sign of training."""
KNOBS_ENV = "GPUMON_KNOBS"
"""A JSON object of knobs (KNOBS) the hook applies at install: how trial runs change a knob."""
GPU_TIMING_ENV = "GPUMON_HOOK_GPU_TIMING"
"""N: time every Nth step with CUDA events (and every step slower than 20 ms); 0: no GPU timing. Default 8."""
BUDGET_EVERY_ENV = "GPUMON_HOOK_BUDGET_EVERY"
"""N: measure the step time budget on one step in N (and on every step of a diagnosis window); 0: never. Default 16."""
NVTX_ENV = "GPUMON_NVTX"
""""1" (or true/on/yes): the hook emits NVTX ranges (step, data wait, forward, backward, optimizer); run --nvtx."""
FLOPS_ENV = "GPUMON_HOOK_FLOPS"
"""N: count one step's FLOPs at step 30 and then every Nth step; 0: never. Default 2000."""
SAMPLE_HZ_ENV = "GPUMON_HOOK_SAMPLE_HZ"
"""N: the stack sampler reads the training thread's stack and the GPU's state N times a second; 0: never. Default 20."""

# Hook -> client.
HELLO = "hello"
STEPS = "steps"
STATE = "state"
PONG = "pong"
SUBSCRIBED = "subscribed"
DIAGNOSING = "diagnosing"
DIAGNOSIS = "diagnosis"
KNOB_ACK = "knob_ack"
PROFILING = "profiling"
PROFILE_RESULT = "profile_result"
ERROR = "error"
BYE = "bye"
SERVER_TYPES = frozenset(
    {HELLO, STEPS, STATE, PONG, SUBSCRIBED, DIAGNOSING, DIAGNOSIS, KNOB_ACK, PROFILING, PROFILE_RESULT, ERROR, BYE}
)

# Client -> hook.
PING = "ping"
SUBSCRIBE = "subscribe"
GET_STATE = "get_state"
DIAGNOSE = "diagnose"
SET_KNOB = "set_knob"
PROFILE = "profile"
REQUEST_TYPES = frozenset({PING, SUBSCRIBE, GET_STATE, DIAGNOSE, SET_KNOB, PROFILE})

# `error` codes.
E_BAD_JSON = "bad_json"
E_BAD_MESSAGE = "bad_message"
E_UNKNOWN_TYPE = "unknown_type"
E_LINE_TOO_LONG = "line_too_long"
E_TOO_MANY_CLIENTS = "too_many_clients"
E_BAD_KNOB = "bad_knob"
E_BUSY = "busy"
E_TOO_MANY_ERRORS = "too_many_errors"
E_OVER_BUDGET = "over_budget"

# Where a step boundary came from (StepRecord.source).
SOURCE_OPTIMIZER = "optimizer"
SOURCE_BACKWARD = "backward"
SOURCE_DATALOADER = "dataloader"
SOURCE_MANUAL = "manual"
STEP_SOURCES = (SOURCE_OPTIMIZER, SOURCE_BACKWARD, SOURCE_DATALOADER, SOURCE_MANUAL)

DIAGNOSE_MAX_STEPS = 10_000
PROFILE_MAX_STEPS = 100
"""A profiler capture keeps every event of every step in memory until it is written: a few steps are enough."""
BACKLOG_MAX = 4096


class ProtocolError(ValueError):
    """A line that is not a valid protocol message, or a peer that does not speak this version.

    `code` is the `error` code to answer with; `request_id` the request's `id` when the line could be read that far.
    """

    def __init__(self, message: str, code: str = E_BAD_MESSAGE, request_id: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id
