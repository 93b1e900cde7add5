"""Counts host-device synchronizations inside a diagnosis window, via torch's sync debug mode."""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from gpumon.hook.user_frame import first_user_frame

SYNC_WARNING_TEXT = "called a synchronizing CUDA operation"
"""What torch warns with (c10 warn_or_error_on_sync) in sync debug mode "warn"."""
MAX_SITES = 20
_MAX_TRACKED_SITES = 1000
_FILTER_REGEX = ".*" + SYNC_WARNING_TEXT


class SyncCounter:
    """Turns torch.cuda sync debug mode to "warn" and counts the warnings instead of printing them, each at the
    first frame of the job's own code (outside torch, the standard library and site-packages).

    Cost, paid only inside the window: each synchronizing call builds a Python warning (a few
    microseconds) on top of the sync itself. `warnings.showwarning` is wrapped and a filter
    ("always", for that message only) is put first so every occurrence is seen once, not once per
    line; other warnings pass through unchanged. Syncs raised on autograd's C++ threads (rare, in
    backward) are printed by torch rather than counted. Everything is undone by `stop()`.
    """

    def __init__(self, get_mode: Callable[[], int], set_mode: Callable[[int], None]) -> None:
        self._get_mode = get_mode
        self._set_mode = set_mode
        self.count = 0
        self.sites: Counter[tuple[str, int]] = Counter()
        self.active = False
        self._previous_mode = 0
        self._filter: tuple[Any, ...] | None = None
        self._original_showwarning: Callable[..., Any] | None = None
        self._installed_showwarning: Callable[..., Any] | None = None

    def start(self) -> str | None:
        """Begin counting; returns why it cannot (None when started)."""
        previous = int(self._get_mode())
        if previous != 0:
            return "the job set torch.cuda sync debug mode itself; not changing it"
        self.count = 0
        self.sites.clear()
        self._original_showwarning = warnings.showwarning
        self._installed_showwarning = self._showwarning  # one bound-method object, to recognise it later
        warnings.showwarning = self._installed_showwarning
        warnings.filterwarnings("always", message=_FILTER_REGEX, category=UserWarning)
        self._filter = warnings.filters[0]
        self._previous_mode = previous
        self.active = True
        try:
            self._set_mode(1)
        except BaseException:
            self.stop()
            raise
        return None

    def stop(self) -> None:
        """Restore the sync debug mode, the warnings filter and showwarning."""
        if not self.active:
            return
        self.active = False
        try:
            self._set_mode(self._previous_mode)
        finally:
            if self._filter is not None and self._filter in warnings.filters:
                cast("list[Any]", warnings.filters).remove(self._filter)  # a list at runtime
                mutated = getattr(warnings, "_filters_mutated", None)  # resets the once-per-line caches
                if mutated is not None:
                    mutated()
            self._filter = None
            # Someone may have replaced showwarning meanwhile; then our wrapper, now inactive, passes through.
            if warnings.showwarning is self._installed_showwarning and self._original_showwarning is not None:
                warnings.showwarning = self._original_showwarning

    def top_sites(self) -> list[dict[str, Any]]:
        """The lines that synced most, most first (at most MAX_SITES)."""
        return [{"file": file, "line": line, "count": n} for (file, line), n in self.sites.most_common(MAX_SITES)]

    def _showwarning(
        self, message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if self.active and SYNC_WARNING_TEXT in str(message):
            self.count += 1
            # The warning names torch's own line (e.g. torch/storage.py); the site is the job's line that called it.
            site = first_user_frame(sys._getframe(1)) or (filename, lineno)
            if site in self.sites or len(self.sites) < _MAX_TRACKED_SITES:
                self.sites[site] += 1
            return
        original = self._original_showwarning or warnings._showwarning_orig  # type: ignore[attr-defined]
        original(message, category, filename, lineno, file, line)
