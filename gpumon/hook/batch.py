"""How many samples a DataLoader batch holds, found cheaply from its structure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 4


def count_samples(batch: Any, _depth: int = 0) -> int | None:
    """The batch size of `batch`, or None when its structure does not say.

    A tensor (or anything with a `.shape`): its first dimension. A mapping: its first value. A
    list/tuple: its first element, except a list of samples (dicts, strings, numbers), whose length
    is the count. Only the first branch is followed, so the cost does not grow with the batch.
    """
    if _depth > _MAX_DEPTH:
        return None
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else 1
        except (TypeError, IndexError, ValueError):
            return None
    if isinstance(batch, Mapping):
        for value in batch.values():
            return count_samples(value, _depth + 1)
        return None
    if isinstance(batch, (list, tuple)):
        if not batch:
            return 0
        first = batch[0]
        if isinstance(first, (Mapping, str, bytes, int, float)):
            return len(batch)
        return count_samples(first, _depth + 1)
    return None
