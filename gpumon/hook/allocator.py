"""The CUDA caching allocator seen from the job: its `torch.cuda.empty_cache()` calls, and its cudaMalloc/cudaFree.

`empty_cache()` hands the cache back to the driver (it waits for the device), so the next step's allocations go to
cudaMalloc again; a job that calls it every step pays for both. The wrapper counts the calls from any thread, their
wall time and the job's line that made them (bounded). The allocator's own counters of device allocations and frees
are read from `torch.cuda.memory_stats_as_nested_dict` (host-side counters, no CUDA call) only once the job has
initialized CUDA: never initializing it, and never on a torch without it.

Where the cache holds free blocks (reserved > allocated, host-side counters), `empty_cache()` will cudaFree them, and
cudaFree waits for the whole device: the wrapper then first waits for the current stream itself (a part of the wait
the call makes anyway, so no wait is added) and times the rest, the frees, as GPU idle (`idle_seconds`): the stream
is empty and the host is inside the allocator.

While the `skip_empty_cache` knob is on, the wrapper returns at once without calling it (the cache stays, the GPU is
not drained): those calls are counted as `skipped`, not as calls.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from gpumon.hook.user_frame import first_user_frame
from gpumon.protocol.messages import SyncSite

MAX_SITES = 64
"""Distinct lines counted; calls from further lines go under OTHER_SITE."""
SITES_SENT = 8
OTHER_SITE = ("(other lines)", 0)


class EmptyCacheCounter:
    """Counts `torch.cuda.empty_cache()` calls; `wrap()` gives the function to put in its place."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.calls = 0
        self.seconds = 0.0
        self.idle_seconds = 0.0
        """Of `seconds`, the frees after the current stream had drained: the GPU idle for certain."""
        self.sites: dict[tuple[str, int], int] = {}
        self.skip = False
        """The skip_empty_cache knob: calls return at once, counted in `skipped`."""
        self.skipped = 0

    def wrap(self, original: Callable[..., Any], cuda: Any = None) -> Callable[..., Any]:
        """torch.cuda.empty_cache (`original`) wrapped: each call timed and counted, or skipped."""
        counter = self
        clock = self._clock

        def empty_cache(*args: Any, **kwargs: Any) -> Any:
            if counter.skip:
                counter.skipped += 1
                return None
            started = clock()
            drained = counter._drain(cuda)
            freeing = clock()
            try:
                return original(*args, **kwargs)
            finally:
                ended = clock()
                if drained:
                    counter.idle_seconds += ended - freeing
                counter._count(ended - started, sys._getframe(1))

        empty_cache.__name__ = getattr(original, "__name__", "empty_cache")
        empty_cache.__qualname__ = getattr(original, "__qualname__", "empty_cache")
        empty_cache.__doc__ = getattr(original, "__doc__", None)
        empty_cache.__wrapped__ = original  # type: ignore[attr-defined]
        return empty_cache

    @staticmethod
    def _drain(cuda: Any) -> bool:
        """Wait for the current stream where empty_cache is about to wait for the device anyway; whether it did."""
        try:
            if cuda is None or not cuda.is_initialized() or cuda.is_current_stream_capturing():
                return False
            if cuda.memory_reserved() <= cuda.memory_allocated():
                return False  # nothing cached to free: empty_cache will not wait, so neither may we
            cuda.current_stream().synchronize()
            return True
        except Exception:  # noqa: BLE001 - the job's call still happens
            return False

    def _count(self, seconds: float, caller: Any) -> None:
        try:
            self.calls += 1
            self.seconds += seconds
            site = first_user_frame(caller) or OTHER_SITE
            sites = self.sites
            if site not in sites and len(sites) >= MAX_SITES:
                site = OTHER_SITE
            sites[site] = sites.get(site, 0) + 1
        except Exception:  # noqa: BLE001 - bookkeeping only; the job's call has happened
            pass

    def top_sites(self, limit: int = SITES_SENT) -> list[SyncSite]:
        """The lines that called it most, most first (a copy safe against the training thread counting)."""
        for _ in range(5):
            try:
                items = list(self.sites.items())
                break
            except RuntimeError:  # grew during the copy
                continue
        else:
            return []
        items.sort(key=lambda item: -item[1])
        return [SyncSite(file=file, line=line, count=count) for (file, line), count in items[:limit]]


def device_alloc_counts(torch: Any, device: int | None) -> tuple[int, int] | None:
    """(cudaMalloc calls, cudaFree calls) of the caching allocator on `device` since the job started; None while
    `device` is unknown (the runtime knows it only once the job has initialized CUDA: it is never initialized here)
    or the counters are missing."""
    if device is None:
        return None
    read = getattr(torch.cuda, "memory_stats_as_nested_dict", None)
    stats = read(device) if read is not None else None
    if not isinstance(stats, dict):
        return None
    allocs = stats.get("num_device_alloc")
    frees = stats.get("num_device_free")
    if not isinstance(allocs, int) or not isinstance(frees, int):
        return None
    return allocs, frees
