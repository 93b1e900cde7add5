"""How many samples a DataLoader batch holds, found cheaply from its structure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 4
_MAPPING_TYPES_MAX = 256
_mapping_types: dict[type, bool] = {}


def count_samples(batch: Any) -> int | None:
    """The batch size of `batch`, or None when its structure does not say.

    A tensor (or anything with a `.shape`): its first dimension. A mapping: its first value. A
    list/tuple: its first element, except a list of samples (dicts, strings, numbers), whose length
    is the count. Only the first branch is followed, so the cost does not grow with the batch.
    A loop rather than recursion, and the Mapping check remembered per type: this runs on batches cold (the default
    collate's list of tensors is counted inline by HookRuntime.dataloader_next, without this call).
    """
    mapping_types = _mapping_types
    for _ in range(_MAX_DEPTH + 1):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else 1
            except (TypeError, IndexError, ValueError):
                return None
        is_mapping = mapping_types.get(type(batch))
        if is_mapping is None:
            is_mapping = _remember_mapping(batch)
        if is_mapping:
            for value in batch.values():
                batch = value
                break
            else:
                return None
        elif isinstance(batch, (list, tuple)):
            if not batch:
                return 0
            first = batch[0]
            if isinstance(first, (str, bytes, int, float)):
                return len(batch)
            is_mapping = mapping_types.get(type(first))
            if is_mapping is None:
                is_mapping = _remember_mapping(first)
            if is_mapping:
                return len(batch)
            batch = first
        else:
            return None
    return None


def _remember_mapping(value: Any) -> bool:
    """isinstance(value, Mapping), remembered for its type: the ABC check runs Python code (abc.py) each time."""
    is_mapping = isinstance(value, Mapping)
    if len(_mapping_types) < _MAPPING_TYPES_MAX:
        _mapping_types[type(value)] = is_mapping
    return is_mapping
