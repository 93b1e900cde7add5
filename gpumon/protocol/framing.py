"""Framing: one compact JSON object per line, with limits on line length and nesting checked before parsing."""

from __future__ import annotations

import json
import operator
import re
from itertools import accumulate
from typing import Any

from gpumon.printable import escape_surrogates
from gpumon.protocol.messages import Error, Message
from gpumon.protocol.names import E_BAD_JSON, E_LINE_TOO_LONG, ERROR, ProtocolError
from gpumon.protocol.validator import validate

MAX_LINE = 64 * 1024
"""Longest request line (client -> hook) in bytes, newline included. Longer: error and close."""
MAX_MESSAGE = 1024 * 1024
"""Longest message line (hook -> client) a client needs to accept, in bytes."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted. Checked before parsing: a deeper line never reaches json."""

# A JSON string, or an unterminated one up to the end: every quote starts a match, so stripping them is linear. The
# repeat can stop only before a quote or at the end, where the match ends, so it never backtracks (Python 3.10 has
# no possessive `*+`).
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.|\\\Z)*(?:"|\Z)', re.DOTALL)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # an opener adds 2, a closer 0; minus 1 per bracket


def nesting_depth(raw: bytes) -> int:
    """The deepest array/object nesting of a JSON text, outside strings (its deepest open-bracket count)."""
    skeleton = _JSON_STRING.sub(b"", raw).translate(_BRACKET_STEPS, _NOT_BRACKETS)
    return max(map(operator.sub, accumulate(skeleton), range(1, len(skeleton) + 1)), default=0)


def encode(msg: Message) -> bytes:
    """One message as a compact JSON line ending in a newline. NaN/inf are refused (not JSON).

    A lone surrogate in a string (an undecodable byte as os and sys decode it) is written out: U+DCFF as `\\xff`.
    """
    if not isinstance(msg.get("type"), str):
        raise ProtocolError("a message needs a string 'type'")
    try:
        text = json.dumps(msg, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {msg.get('type')!r:.80} message: {exc}") from exc
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate (an undecodable byte of argv, a path or the environment) is not UTF-8: send it written
        # out (`\\xff`), a JSON-escaped backslash inside the string it sits in, so the line is always UTF-8.
        text = _LONE_SURROGATE.sub(lambda m: escape_surrogates(m.group()).replace("\\", "\\\\"), text)
        return text.encode("utf-8") + b"\n"


def decode(line: bytes | str, *, limit: int = MAX_MESSAGE) -> dict[str, Any]:
    """Parse and check one line; return the message dict or raise ProtocolError (with an error code).

    A known type's fields are checked; an unknown type passes (a client ignores it, the hook answers
    it with `unknown_type`). `limit` is the longest line accepted, in bytes. Never raises anything else.
    """
    raw = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else bytes(line)
    if len(raw) > limit:
        raise ProtocolError(f"line of {len(raw)} bytes is longer than {limit}", E_LINE_TOO_LONG)
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and nesting_depth(raw) > MAX_DEPTH:
        raise ProtocolError(f"not JSON the protocol accepts: nested deeper than {MAX_DEPTH} levels", E_BAD_JSON)
    try:
        msg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"not JSON: {exc}", E_BAD_JSON) from exc
    if not isinstance(msg, dict):
        raise ProtocolError("a message must be a JSON object")
    validate(msg)
    return msg


def error_message(code: str, message: str, request_id: Any = None) -> Error:
    """An `error` message with `code` and `message`, answering request `request_id` if given."""
    msg = Error(type=ERROR, code=code, message=message)
    if request_id is not None:
        msg["id"] = request_id
    return msg
