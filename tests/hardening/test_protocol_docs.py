"""docs/protocol.md's field tables agree with the TypedDicts (names, types, required fields) and with the validator
(a documented type is accepted by `decode`, every other JSON kind refused)."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from gpumon import protocol

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
HEADER = "| field | type | meaning |"
SAMPLES: dict[str, Any] = {"null": None, "bool": True, "int": 3, "float": 1.5, "str": "x", "list": [], "object": {}}


def doc_tables() -> dict[str, dict[str, str]]:
    """{subject: {field: type cell}}; a subject is a message type (a `### \\`name\\`` heading) or a TypedDict name
    (a `**Name**` paragraph) introducing the table below it."""
    tables: dict[str, dict[str, str]] = {}
    subject: str | None = None
    lines = DOC.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        heading = re.match(r"### `(\w+)`", line) or re.match(r"\*\*(\w+)\*\*", line)
        if heading:
            subject = heading.group(1)
        if line.strip() != HEADER:
            continue
        assert subject is not None and subject not in tables, f"table at line {index + 1}: subject {subject!r}"
        rows = tables[subject] = {}
        for row in lines[index + 2 :]:
            if not row.startswith("|"):
                break
            names_cell, type_cell = (cell.strip() for cell in row.strip("|").split("|")[:2])
            for name in re.findall(r"`(\w+)`", names_cell):
                rows[name] = type_cell
    return tables


TABLES = doc_tables()


def render(hint: Any) -> str:
    """A type annotation as the doc writes it."""
    if hint is Any:
        return "any"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [arm for arm in args if arm is not type(None)]
        assert len(rest) == 1 and len(args) == 2, hint
        return f"{render(rest[0])} or null"
    if origin is list:
        return f"list[{render(args[0])}]"
    if origin is dict:
        return "object" if args[1] is Any else f"object of {render(args[1])}"
    return str(hint.__name__)


def kinds_of(doc_type: str) -> set[str]:
    """The JSON kinds a documented type admits, read from the doc alone."""
    if doc_type == "any":
        return set(SAMPLES)
    if doc_type.endswith(" or null"):
        return kinds_of(doc_type[: -len(" or null")]) | {"null"}
    if doc_type == "float":
        return {"int", "float"}
    if doc_type in ("int", "str", "bool"):
        return {doc_type}
    if doc_type.startswith("list["):
        return {"list"}
    return {"object"}  # object, object of X, or a table's name


def split(cell: str) -> tuple[str, bool]:
    doc_type, _, flag = cell.partition(", ")
    assert flag in ("", "required"), cell
    return doc_type, flag == "required"


def typed_dicts() -> dict[str, type]:
    """Every TypedDict a message reaches, by the name the doc uses: message types, then nested shapes by class name."""
    found: dict[str, type] = dict(protocol.SHAPES)
    pending = list(protocol.SHAPES.values())
    while pending:
        for hint in typing.get_type_hints(pending.pop()).values():
            for candidate in (
                hint,
                *typing.get_args(hint),
                *(a for arg in typing.get_args(hint) for a in typing.get_args(arg)),
            ):
                if typing.is_typeddict(candidate) and candidate.__name__ not in found:
                    found[candidate.__name__] = candidate
                    pending.append(candidate)
    return found


SHAPES = typed_dicts()


def test_every_message_and_nested_object_has_a_table_and_nothing_else_does() -> None:
    assert set(TABLES) == set(SHAPES)


@pytest.mark.parametrize("subject", sorted(SHAPES))
def test_fields_types_and_required_agree_with_the_typeddict(subject: str) -> None:
    shape = SHAPES[subject]
    hints = {name: hint for name, hint in typing.get_type_hints(shape).items() if name != "type"}
    documented = {name: split(cell) for name, cell in TABLES[subject].items()}
    assert set(documented) == set(hints), f"{subject}: documented {sorted(documented)}, code {sorted(hints)}"
    for name, (doc_type, _required) in documented.items():
        assert doc_type == render(hints[name]), f"{subject}.{name}: doc says {doc_type}, code {render(hints[name])}"
    if subject in protocol.SHAPES:
        required = {name for name, (_doc_type, is_required) in documented.items() if is_required}
        assert required == set(shape.__required_keys__) - {"type"}, subject


@pytest.mark.parametrize("kind", sorted(protocol.SHAPES))
def test_the_validator_accepts_exactly_the_documented_types(kind: str) -> None:
    documented = {name: split(cell) for name, cell in TABLES[kind].items()}
    base = {"type": kind}
    for name, (doc_type, required) in documented.items():
        if required:
            base[name] = SAMPLES[sorted(kinds_of(doc_type) - {"null"})[0]]
    assert protocol.decode(protocol.encode(base)) == base
    for name, (doc_type, required) in documented.items():
        for json_kind, sample in SAMPLES.items():
            line = protocol.encode({**base, name: sample})
            if json_kind in kinds_of(doc_type):
                assert protocol.decode(line)[name] == sample
            else:
                with pytest.raises(protocol.ProtocolError) as caught:
                    protocol.decode(line)
                assert caught.value.code == protocol.E_BAD_MESSAGE, (kind, name, json_kind)
        if required:
            with pytest.raises(protocol.ProtocolError, match="needs field"):
                protocol.decode(protocol.encode({key: value for key, value in base.items() if key != name}))
