"""What the dashboard shows, from the command line and the config file: settings, the user and GPUs to show."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpumon.config import Settings
from gpumon.sampling.gpu_choice import only_gpus
from gpumon.sampling.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class ViewOptions:
    """The dashboard's settings and which user's processes and which GPUs it shows."""

    settings: Settings = field(default_factory=Settings)
    user: str | None = None
    """Only this user's processes (--user)."""
    gpus: frozenset[str] | None = None
    """Only these GPUs, by index or UUID prefix (--only, --only-visible); None: all."""
    config_file: Path | None = None
    """Where the theme picked in the command palette is saved; None: not saved."""
    warnings: tuple[str, ...] = ()
    """Problems found in the config file, one line each (shown once the dashboard starts)."""
    ascii: bool = False
    """Graphs, sparklines and bars in ASCII (--ascii, or a terminal that cannot show more: glyphs.wants_ascii)."""

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with only the chosen GPUs and the processes on them (the table applies the user)."""
        return only_gpus(snapshot, self.gpus)
