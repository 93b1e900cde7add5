"""What the dashboard shows, from the command line and the config file: settings, the user and GPUs to show."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpumon.config import Settings
from gpumon.sampling.snapshot import GpuSample, Snapshot


def visible_devices(environ: Mapping[str, str]) -> frozenset[str] | None:
    """CUDA_VISIBLE_DEVICES as GPU indices or UUID prefixes ('0,2', 'GPU-8f...'); None when unset (all GPUs).

    CUDA stops at the first invalid entry, and so does this; an empty value hides every GPU."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    devices: list[str] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        devices.append(entry)
    return frozenset(devices)


def _shown_gpu(gpu: GpuSample, gpus: Collection[str]) -> bool:
    return str(gpu.index) in gpus or any(not key.isdigit() and gpu.uuid.startswith(key) for key in gpus)


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
        if self.gpus is None:
            return snapshot
        chosen = self.gpus
        gpus = tuple(gpu for gpu in snapshot.gpus if _shown_gpu(gpu, chosen))
        indices = {gpu.index for gpu in gpus}
        processes = tuple(process for process in snapshot.processes if indices.intersection(process.gpu_indices))
        gpu_error = snapshot.gpu_error
        if snapshot.gpus and not gpus:
            gpu_error = "no GPU here matches " + ",".join(sorted(chosen))
        return replace(snapshot, gpus=gpus, processes=processes, gpu_error=gpu_error)
