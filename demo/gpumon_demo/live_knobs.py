"""DataLoader settings changed live by gpumon (set_knob) take effect at the loader's next iter(): this tells the
trainer when its hook holds settings the loader does not have yet, so it starts its next pass over the data now
rather than at the end of an ImageNet-sized epoch. Without gpumon's hook it never asks for a new pass."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class LiveLoaderSettings:
    """Asks gpumon's hook (when it is in this process) for the DataLoader settings it will apply at the next iter()."""

    def __init__(self) -> None:
        lifecycle = sys.modules.get("gpumon.hook.lifecycle")
        self._runtime: Callable[[], Any] | None = getattr(lifecycle, "runtime", None)

    def pending(self, loader: Any) -> bool:
        """Whether the next iter(loader) would change one of its settings."""
        if self._runtime is None:
            return False
        try:
            runtime = self._runtime()
            if runtime is None or not runtime.active:
                return False  # an inactive hook applies nothing at iter()
            settings = dict(runtime.knobs.dataloader or {})
            # None (prefetch_factor) means the library's default, whatever the loader shows.
            return any(value is not None and getattr(loader, name, value) != value for name, value in settings.items())
        except Exception:  # noqa: BLE001 - a hook of another version must not stop the training
            return False

    def applied(self, loader: Any) -> None:
        """Called after a new iter(loader): if its settings still differ, the hook cannot apply them, so stop
        asking (a new pass every step would cost far more than a change that waits for the next epoch)."""
        if self.pending(loader):
            self._runtime = None
