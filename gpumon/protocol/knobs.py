"""Knobs: what `set_knob` (live) and GPUMON_KNOBS (trial runs) may change, and their checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from gpumon.protocol.names import E_BAD_KNOB, ProtocolError


class KnobSpec(TypedDict):
    """One knob's entry in KNOBS: its kind and bounds, whether set_knob may change it live, when it applies."""

    kind: str  # "bool" | "int" | "optional_int" | "choice"
    live: bool  # settable on a running job with set_knob
    applies: str  # "next_step" | "next_batch" | "next_dataloader_iter"
    choices: tuple[str, ...]
    min: int
    max: int
    doc: str


APPLIES_NEXT_STEP = "next_step"
APPLIES_NEXT_BATCH = "next_batch"
"""At the next step boundary, each DataLoader's iterator is rebuilt mid-epoch with the new settings (the rest of the
epoch in the same order); a loader that cannot be (an IterableDataset) takes them at its next iter()."""
APPLIES_NEXT_DATALOADER_ITER = "next_dataloader_iter"

KNOBS: dict[str, KnobSpec] = {
    "cudnn_benchmark": KnobSpec(
        kind="bool",
        live=True,
        applies=APPLIES_NEXT_STEP,
        choices=(),
        min=0,
        max=0,
        doc="torch.backends.cudnn.benchmark",
    ),
    "num_workers": KnobSpec(
        kind="int",
        live=True,
        applies=APPLIES_NEXT_BATCH,
        choices=(),
        min=0,
        max=256,
        doc="DataLoader.num_workers, for every DataLoader of the job",
    ),
    "pin_memory": KnobSpec(
        kind="bool",
        live=True,
        applies=APPLIES_NEXT_BATCH,
        choices=(),
        min=0,
        max=0,
        doc="DataLoader.pin_memory",
    ),
    "prefetch_factor": KnobSpec(
        kind="optional_int",
        live=True,
        applies=APPLIES_NEXT_BATCH,
        choices=(),
        min=1,
        max=64,
        doc="DataLoader.prefetch_factor (batches per worker in flight)",
    ),
    "persistent_workers": KnobSpec(
        kind="bool",
        live=True,
        applies=APPLIES_NEXT_BATCH,
        choices=(),
        min=0,
        max=0,
        doc="DataLoader.persistent_workers",
    ),
    "skip_empty_cache": KnobSpec(
        kind="bool",
        live=True,
        applies=APPLIES_NEXT_STEP,
        choices=(),
        min=0,
        max=0,
        doc="torch.cuda.empty_cache() a no-op (the call counted as skipped): the caching allocator keeps its blocks",
    ),
    "gc_freeze": KnobSpec(
        kind="bool",
        live=True,
        applies=APPLIES_NEXT_STEP,
        choices=(),
        min=0,
        max=0,
        doc="gc.freeze() and gc.set_threshold raised to at least (50000, 50, 100); off: unfrozen, thresholds restored",
    ),
    "tf32": KnobSpec(
        kind="bool",
        live=False,
        applies=APPLIES_NEXT_STEP,
        choices=(),
        min=0,
        max=0,
        doc="torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 (numerics: trial runs only)",
    ),
    "float32_matmul_precision": KnobSpec(
        kind="choice",
        live=False,
        applies=APPLIES_NEXT_STEP,
        choices=("highest", "high", "medium"),
        min=0,
        max=0,
        doc="torch.set_float32_matmul_precision (numerics: trial runs only)",
    ),
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
            raise ProtocolError(f"unknown knob {name!r:.80} (known: {', '.join(sorted(KNOBS))})", E_BAD_KNOB)
        if live and not spec["live"]:
            raise ProtocolError(f"knob {name!r} changes numerics: use a trial run (GPUMON_KNOBS)", E_BAD_KNOB)
        if not _value_ok(spec, value):
            raise ProtocolError(f"bad value {value!r:.80} for knob {name!r:.80} ({_describe_knob(spec)})", E_BAD_KNOB)
        checked[name] = value
    return checked


def _value_ok(spec: KnobSpec, value: object) -> bool:
    kind = spec["kind"]
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "choice":
        return isinstance(value, str) and value in spec["choices"]
    if kind == "optional_int" and value is None:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and spec["min"] <= value <= spec["max"]


def _describe_knob(spec: KnobSpec) -> str:
    kind = spec["kind"]
    if kind == "bool":
        return "true or false"
    if kind == "choice":
        return "one of " + ", ".join(spec["choices"])
    text = f"an integer {spec['min']}..{spec['max']}"
    return text + " or null" if kind == "optional_int" else text
