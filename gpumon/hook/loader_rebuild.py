"""DataLoader settings changed mid-epoch: a new iterator takes over the rest of the epoch's batch indices.

At a batch boundary the old iterator's index iterator (its place in the sampler's order) is handed to a new iterator
built with the loader's new settings; the old one keeps only the batches its workers already hold, yields them first,
in order, then shuts its workers down. The loop's handle (the old iterator) forwards to the new one from then on, so
each index of the epoch is yielded exactly once, in the sampler's order. Building the new iterator draws a worker seed
from the loader's generator (or the global one): that state is put back, so later epochs shuffle as they would have.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

LOADER_SETTINGS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers")
DEFAULT_PREFETCH = 2
"""The prefetch_factor a loader built without workers gets with its first workers (torch's default)."""
MAP_STYLE = 0
"""torch's _DatasetKind.Map."""
NEXT = "_gpumon_next"
"""The iterator attribute naming the iterator that took over (set on the old one)."""
DRAINING = "_gpumon_draining"
"""The iterator attribute saying it still holds batches its workers fetched before the change."""

_NONE_LEFT = object()
_forwarding_classes: dict[type, type] = {}


def not_live_reason(loader: Any, iterator: Any) -> str | None:
    """Why `loader`'s running iterator cannot take new settings mid-epoch (None: it can)."""
    from torch.utils.data import dataloader

    if getattr(loader, "_dataset_kind", None) != MAP_STYLE:
        name = type(getattr(loader, "dataset", None)).__name__
        return (
            f"not live: {name} is an IterableDataset (each worker holds its own place in it); applies at its next epoch"
        )
    if not isinstance(iterator, dataloader._BaseDataLoaderIter):
        return f"not live: the loader's iterator is a {type(iterator).__name__}; applies at its next epoch"
    return None


def wanted_settings(loader: Any, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings among `knobs` that `loader` does not have, with the prefetch default a first worker needs."""
    wanted = {
        name: knobs[name] for name in LOADER_SETTINGS if name in knobs and getattr(loader, name, None) != knobs[name]
    }
    workers = wanted.get("num_workers", loader.num_workers)
    if workers > 0 and wanted.get("prefetch_factor", loader.prefetch_factor) is None:
        wanted["prefetch_factor"] = DEFAULT_PREFETCH
    return wanted


def set_settings(loader: Any, settings: Mapping[str, Any]) -> None:
    """Set DataLoader attributes as they are, past DataLoader.__setattr__'s checks after init."""
    for name, value in settings.items():
        object.__setattr__(loader, name, value)  # DataLoader.__setattr__ refuses persistent_workers after init


def take_over(torch: Any, loader: Any, old: Any, knobs: Mapping[str, Any]) -> Any:
    """Give `loader` the DataLoader settings in `knobs` now: a new iterator over the rest of the epoch of `old` (the
    loader's running iterator), which forwards to it from now on. Returns the new iterator; None when nothing changed
    or the epoch's indices are all handed out (the settings then apply at the next iter(), as they would without
    this). Raises (the loader and `old` as they were) when the new iterator cannot be built."""
    wanted = wanted_settings(loader, knobs)
    if not wanted:
        return None
    indices = old._sampler_iter
    first = next(indices, _NONE_LEFT) if indices is not None else _NONE_LEFT
    if first is _NONE_LEFT:
        set_settings(loader, wanted)
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator = None  # a persistent iterator built with the old settings: the next iter() builds anew
        return None
    before = {name: getattr(loader, name) for name in wanted}
    handover = _Handover(itertools.chain((first,), indices))
    set_settings(loader, wanted)
    try:
        new = _build(torch, loader, handover)
    except BaseException:
        set_settings(loader, before)
        old._sampler_iter = itertools.chain(handover.taken, handover.source)
        raise
    new._sampler_iter = handover.source
    old._sampler_iter = iter(())
    if loader.persistent_workers and loader.num_workers > 0:
        loader._iterator = new  # its workers serve the next epochs
    elif getattr(loader, "_iterator", None) is old:
        loader._iterator = None
    _forward(old, new)
    return new


class _Handover:
    """The rest of the epoch's batch indices, noting those a new iterator took while it was built."""

    def __init__(self, source: Iterator[Any]) -> None:
        self.source = source
        self.taken: list[Any] = []

    def __iter__(self) -> _Handover:
        return self

    def __next__(self) -> Any:
        item = next(self.source)
        self.taken.append(item)
        return item


class _IndexSamplerStandIn:
    """The loader's index sampler while the new iterator is built: iterating it gives the rest of the epoch."""

    def __init__(self, indices: Iterator[Any], sampler: Any) -> None:
        self._indices = indices
        self._sampler = sampler

    def __iter__(self) -> Iterator[Any]:
        return self._indices

    def __len__(self) -> int:
        return len(self._sampler)


def _build(torch: Any, loader: Any, indices: Iterator[Any]) -> Any:
    """loader._get_iterator() drawing from `indices`, with the RNG its worker seed draws from put back."""
    attribute = "batch_sampler" if loader._auto_collation else "sampler"
    sampler = getattr(loader, attribute)
    generator = loader.generator
    rng = generator.get_state() if generator is not None else torch.get_rng_state()
    object.__setattr__(loader, attribute, _IndexSamplerStandIn(indices, sampler))
    try:
        new = loader._get_iterator()
    finally:
        object.__setattr__(loader, attribute, sampler)
        if generator is not None:
            generator.set_state(rng)
        else:
            torch.set_rng_state(rng)
    new._index_sampler = sampler  # its next epoch (persistent workers) starts from the real sampler
    return new


def _forward(old: Any, new: Any) -> None:
    """Make `old` yield the batches its workers hold, then shut them down and forward to `new`."""
    holds = getattr(old, "_rcvd_idx", 0) < getattr(old, "_send_idx", 0)
    old.__dict__[NEXT] = new
    old.__dict__[DRAINING] = holds
    old.__class__ = _forwarding_class(type(old))
    if not holds:
        _retire(old)


def _retire(iterator: Any) -> None:
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _forwarding_class(cls: type) -> type:
    made = _forwarding_classes.get(cls)
    if made is not None:
        return made

    parent: Any = cls

    def __next__(self: Any) -> Any:
        state = self.__dict__
        if state[DRAINING]:
            try:
                return parent.__next__(self)  # looked up now: the hook's wrapper while it is installed
            except StopIteration:
                state[DRAINING] = False
                _retire(self)
        target = state[NEXT]
        while NEXT in target.__dict__ and not target.__dict__[DRAINING]:
            target = state[NEXT] = target.__dict__[NEXT]  # a later change's forwarder has drained: skip it
        return next(target)

    made = type(f"Rebuilt{cls.__name__}", (cls,), {"__next__": __next__, "__module__": __name__})
    _forwarding_classes[cls] = made
    return made
