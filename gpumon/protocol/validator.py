"""The message validator, built from the TypedDicts in gpumon.protocol.messages (one source for the field lists)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

from gpumon.protocol import messages, names
from gpumon.protocol.names import ProtocolError

SHAPES: dict[str, type] = {
    names.PING: messages.PingRequest,
    names.GET_STATE: messages.GetStateRequest,
    names.SUBSCRIBE: messages.SubscribeRequest,
    names.DIAGNOSE: messages.DiagnoseRequest,
    names.SET_KNOB: messages.SetKnobRequest,
    names.PROFILE: messages.ProfileRequest,
    names.HELLO: messages.Hello,
    names.STEPS: messages.Steps,
    names.STATE: messages.State,
    names.PONG: messages.Pong,
    names.SUBSCRIBED: messages.Subscribed,
    names.DIAGNOSING: messages.Diagnosing,
    names.DIAGNOSIS: messages.Diagnosis,
    names.KNOB_ACK: messages.KnobAck,
    names.PROFILING: messages.Profiling,
    names.PROFILE_RESULT: messages.ProfileResult,
    names.ERROR: messages.Error,
    names.BYE: messages.Bye,
}
"""The TypedDict of each known message type."""


def json_kind(value: object) -> str:
    """The JSON type of a decoded value: null, bool, int, float, str, list or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else type(value).__name__


def accepted_kinds(hint: Any) -> frozenset[str] | None:
    """The JSON kinds a field annotated `hint` accepts; None: any (typing.Any). An int is a valid float."""
    if hint is Any:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds: set[str] = set()
        for arm in typing.get_args(hint):
            arm_kinds = accepted_kinds(arm)
            if arm_kinds is None:
                return None
            kinds |= arm_kinds
        return frozenset(kinds)
    if hint is type(None):
        return frozenset({"null"})
    if hint is float:
        return frozenset({"int", "float"})
    simple = {bool: "bool", int: "int", str: "str", list: "list", dict: "object"}
    base = origin if origin is not None else hint
    if base in simple:
        return frozenset({simple[base]})
    if typing.is_typeddict(hint):
        return frozenset({"object"})
    raise TypeError(f"no JSON kind for the annotation {hint!r}")


class _Shape:
    """The required fields and the accepted kinds of each field of one message type."""

    __slots__ = ("kinds", "required")

    def __init__(self, typed_dict: type) -> None:
        hints = typing.get_type_hints(typed_dict)
        self.required: tuple[str, ...] = tuple(sorted(getattr(typed_dict, "__required_keys__", frozenset())))
        self.kinds: dict[str, frozenset[str]] = {}
        for name, hint in hints.items():
            kinds = accepted_kinds(hint)
            if kinds is not None:
                self.kinds[name] = kinds


_COMPILED: dict[str, _Shape] = {kind: _Shape(typed_dict) for kind, typed_dict in SHAPES.items()}


def validate(msg: Mapping[str, Any]) -> None:
    """Check a decoded message's fields against its type's TypedDict; raise ProtocolError (with the request's `id`).

    Unknown fields and unknown types pass (receivers ignore what they do not know).
    """
    kind = msg.get("type")
    request_id = msg.get("id")
    if not isinstance(kind, str):
        raise ProtocolError("a message needs a string 'type'", request_id=request_id)
    shape = _COMPILED.get(kind)
    if shape is None:
        return
    for name in shape.required:
        if name not in msg:
            raise ProtocolError(f"{kind!r:.80} needs field {name!r}", request_id=request_id)
    for name, kinds in shape.kinds.items():
        if name in msg and json_kind(msg[name]) not in kinds:
            expected = " or ".join(sorted(kinds))
            found = json_kind(msg[name])
            raise ProtocolError(
                f"{kind!r:.80} field {name!r} has the wrong type: {found}, not {expected}", request_id=request_id
            )


_DROP = object()
_T = typing.TypeVar("_T")
_HINTS: dict[type, dict[str, Any]] = {}


def conform(shape: type[_T], value: object) -> _T:
    """`value` read as the TypedDict `shape`: only its fields, each of an accepted JSON kind, nested objects and
    lists conformed the same way (a list keeps the items of the right kind). Not an object: an empty one. What a
    receiver reads from the result needs no further type checks; `validate` checks only a message's top level."""
    fields: dict[str, Any] = {}
    if isinstance(value, Mapping):
        for name, hint in _hints(shape).items():
            if name in value:
                kept = _conform_value(hint, value[name])
                if kept is not _DROP:
                    fields[name] = kept
    return fields  # type: ignore[return-value]  # built field by field from shape's own annotations


def _hints(shape: type) -> dict[str, Any]:
    hints = _HINTS.get(shape)
    if hints is None:
        hints = _HINTS[shape] = typing.get_type_hints(shape)
    return hints


def _conform_value(hint: Any, value: object) -> object:
    if hint is Any:
        return value
    if typing.is_typeddict(hint):
        return conform(hint, value) if isinstance(value, Mapping) else _DROP
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(hint):
            kept = _conform_value(arm, value)
            if kept is not _DROP:
                return kept
        return _DROP
    if origin is list:
        if not isinstance(value, list):
            return _DROP
        (item_hint,) = typing.get_args(hint) or (Any,)
        items = (_conform_value(item_hint, item) for item in value)
        return [item for item in items if item is not _DROP]
    kinds = accepted_kinds(hint)
    return value if kinds is None or json_kind(value) in kinds else _DROP
