"""Fuzzing the protocol's parser and validator: whatever arrives, decode returns a checked message or raises
ProtocolError, never anything else. Bounded (derandomized, a few hundred examples each) to stay fast on CI."""

from __future__ import annotations

import json
import typing
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpumon import protocol
from gpumon.protocol.validator import accepted_kinds, json_kind

FUZZ = settings(
    max_examples=300, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
known_types = st.sampled_from(sorted(protocol.SHAPES))
HINTS = {kind: typing.get_type_hints(shape) for kind, shape in protocol.SHAPES.items()}
field_names = st.sampled_from(sorted({name for hints in HINTS.values() for name in hints}))


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


def decode_or_protocol_error(line: bytes | str) -> dict[str, Any] | protocol.ProtocolError:
    try:
        return protocol.decode(line, limit=protocol.MAX_LINE)
    except protocol.ProtocolError as exc:
        assert exc.code in (protocol.E_BAD_JSON, protocol.E_BAD_MESSAGE, protocol.E_LINE_TOO_LONG)
        return exc


@FUZZ
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(line: bytes) -> None:
    decode_or_protocol_error(line)
    decode_or_protocol_error(line + b"\n")


@FUZZ
@given(st.text(max_size=500))
def test_arbitrary_text_lone_surrogates_included(line: str) -> None:
    decode_or_protocol_error(line)


@FUZZ
@given(json_values)
def test_arbitrary_json(value: Any) -> None:
    decode_or_protocol_error(json.dumps(value))


@FUZZ
@given(known_types, st.dictionaries(field_names, json_values, max_size=6), json_values)
def test_known_types_with_arbitrary_fields(kind: str, fields: dict[str, Any], request_id: Any) -> None:
    msg = {**fields, "type": kind, "id": request_id}
    result = decode_or_protocol_error(json.dumps(msg))
    if isinstance(result, protocol.ProtocolError):
        assert result.request_id == request_id  # an error reply can always carry the request's id
        return
    assert set(protocol.SHAPES[kind].__required_keys__) <= set(result)
    for name, value in result.items():
        if name in HINTS[kind]:
            kinds = accepted_kinds(HINTS[kind][name])
            assert kinds is None or json_kind(value) in kinds, (name, value)


@FUZZ
@given(st.integers(min_value=1, max_value=100_000), st.sampled_from([b"[", b'{"a":', b"[1,", b'["]",']))
def test_deep_nesting_is_refused_before_parsing(levels: int, opener: bytes) -> None:
    line = b'{"type":"ping","x":' + opener * levels + b"\n"
    result = decode_or_protocol_error(line[: protocol.MAX_LINE])
    if levels + 1 > protocol.MAX_DEPTH:
        assert isinstance(result, protocol.ProtocolError) and result.code == protocol.E_BAD_JSON


@FUZZ
@given(json_values)
def test_nesting_depth_outside_strings_matches_the_value(value: Any) -> None:
    text = json.dumps(value).encode()
    assert protocol.nesting_depth(text) == depth(value)
    if depth({"type": "ping", "v": value}) <= protocol.MAX_DEPTH:
        assert protocol.decode(json.dumps({"type": "ping", "v": value}))["v"] == value


@FUZZ
@given(json_values)
def test_validate_knobs_on_anything(knobs: Any) -> None:
    for live in (True, False):
        try:
            protocol.validate_knobs(knobs, live=live)
        except protocol.ProtocolError as exc:
            assert exc.code == protocol.E_BAD_KNOB
