"""The demo trainer's knobs: names, types, defaults, and parsing of GPUMON_KNOBS (stdlib only)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KNOBS_ENV = "GPUMON_KNOBS"
KNOBS_ACK_ENV = "GPUMON_KNOBS_ACK"
"""A file path: a script that reads GPUMON_KNOBS itself writes there the JSON list of the knob names it
applies, so gpumon's trial runs can tell a knob the script used from one nobody applied."""


KNOBS_LIVE_ENV = "GPUMON_KNOBS_LIVE"
KNOBS_LIVE_ACK_ENV = "GPUMON_KNOBS_LIVE_ACK"
"""File paths a gpumon trial run gives: requests to change knobs while the trainer runs, and its replies (see
live_knobs.ScriptKnobRequests)."""
CHANGEABLE_WHILE_RUNNING = ("batch_size", "amp_bf16", "channels_last", "log_every")
"""The knobs the trainer can change in-process at a step boundary (a new DataLoader, the autocast flag, the model's
memory format, the loss logging); the DataLoader's other knobs and cuDNN autotuning gpumon's hook changes itself."""


class KnobError(ValueError):
    """A bad knob value or a malformed GPUMON_KNOBS; the message is one line meant for the user."""


@dataclass(frozen=True)
class Knob:
    """One setting an experiment can change."""

    name: str
    type: type
    """bool or int (JSON true/false or an integer; a bool is never accepted as an int)."""
    default: Any
    description: str
    minimum: int | None = None
    """For int knobs: the smallest accepted value."""
    nullable: bool = False
    """Whether null is accepted (it means "the library's default")."""
    changes_numerics: bool = False
    """True when the knob changes the math (precision, batch statistics), so results can differ."""
    code: str = ""
    """The code change that applies it, with {value} for the value."""

    def check(self, value: Any) -> Any:
        """Returns `value` if it is valid for this knob, else raises KnobError."""
        if value is None and self.nullable:
            return None
        if self.type is bool:
            if not isinstance(value, bool):
                expected = "true, false or null" if self.nullable else "true or false"
                raise KnobError(f"knob {self.name!r} must be {expected}, got {json.dumps(value)}")
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            expected = "an integer or null" if self.nullable else "an integer"
            raise KnobError(f"knob {self.name!r} must be {expected}, got {json.dumps(value)}")
        if self.minimum is not None and value < self.minimum:
            raise KnobError(f"knob {self.name!r} must be >= {self.minimum}, got {value}")
        return value


KNOWN_KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        Knob(
            "num_workers",
            int,
            0,
            "DataLoader worker processes (0: load in the training process)",
            minimum=0,
            code="DataLoader(..., num_workers={value})",
        ),
        Knob(
            "prefetch_factor",
            int,
            None,
            "batches each worker loads ahead (null: PyTorch's default, 2)",
            minimum=1,
            nullable=True,
            code="DataLoader(..., prefetch_factor={value})",
        ),
        Knob(
            "pin_memory",
            bool,
            False,
            "DataLoader returns page-locked batches; copies become non_blocking",
            code="DataLoader(..., pin_memory={value}); x.to(device, non_blocking=True)",
        ),
        Knob(
            "persistent_workers",
            bool,
            False,
            "keep DataLoader workers alive across epochs",
            code="DataLoader(..., persistent_workers={value})",
        ),
        Knob(
            "batch_size",
            int,
            32,
            "samples per step (changes the optimisation: retune the learning rate)",
            minimum=1,
            changes_numerics=True,
            code="DataLoader(..., batch_size={value})",
        ),
        Knob(
            "amp_bf16",
            bool,
            False,
            "forward pass under torch.autocast with bfloat16",
            changes_numerics=True,
            code="with torch.autocast(device.type, dtype=torch.bfloat16): ...",
        ),
        Knob(
            "tf32",
            bool,
            None,
            "TF32 tensor-core math for fp32 matmuls and convolutions "
            "(null: PyTorch's defaults, on for cuDNN convolutions and off for matmuls)",
            nullable=True,
            changes_numerics=True,
            code="torch.backends.cuda.matmul.allow_tf32 = {value}; torch.backends.cudnn.allow_tf32 = {value}",
        ),
        Knob(
            "cudnn_benchmark",
            bool,
            False,
            "let cuDNN time and pick the fastest convolution algorithms",
            code="torch.backends.cudnn.benchmark = {value}",
        ),
        Knob(
            "channels_last",
            bool,
            False,
            "NHWC memory format for the model and its inputs",
            code="model.to(memory_format=torch.channels_last); x.to(device, memory_format=torch.channels_last)",
        ),
        Knob(
            "augment_in_workers",
            bool,
            True,
            "run the CPU augmentation in Dataset.__getitem__, so in the DataLoader workers when there are any "
            "(false: in the training loop, always in the main process)",
            code="move the transforms into Dataset.__getitem__",
        ),
        Knob(
            "log_every",
            int,
            1,
            "call loss.item() (a host sync) every N steps",
            minimum=1,
            code="if step % {value} == 0: loss.item()",
        ),
    )
}


def default_knobs() -> dict[str, Any]:
    """Every knob at its default."""
    return {name: knob.default for name, knob in KNOWN_KNOBS.items()}


def validate_knobs(values: Mapping[str, Any]) -> dict[str, Any]:
    """Checks names and types of a partial knob mapping; returns a copy or raises KnobError."""
    checked: dict[str, Any] = {}
    for name, value in values.items():
        knob = KNOWN_KNOBS.get(name)
        if knob is None:
            raise KnobError(f"unknown knob {name!r} (known: {', '.join(KNOWN_KNOBS)})")
        checked[name] = knob.check(value)
    return checked


def parse_knobs(text: str | None) -> dict[str, Any]:
    """Parses GPUMON_KNOBS text (a JSON object) into the knobs it sets; empty or None sets none."""
    if text is None or not text.strip():
        return {}
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise KnobError(f"{KNOBS_ENV} is not valid JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(values, dict):
        raise KnobError(f'{KNOBS_ENV} must be a JSON object like {{"num_workers": 4}}, got {text.strip()[:60]}')
    return validate_knobs(values)


def acknowledge_knobs(names: list[str], environ: Mapping[str, str]) -> None:
    """Writes `names` (the GPUMON_KNOBS knobs this run applies) to the file GPUMON_KNOBS_ACK names, if set."""
    path = environ.get(KNOBS_ACK_ENV)
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as stream:
            json.dump(sorted(names), stream)
    except OSError:
        pass  # gpumon then reports the knobs as unconfirmed; the run itself goes on


def format_knobs(values: Mapping[str, Any]) -> str:
    """The GPUMON_KNOBS text that sets `values` (validated), for injecting into a trial run."""
    return json.dumps(validate_knobs(values), sort_keys=True)
