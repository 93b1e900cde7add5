"""The knobs in effect in the training process: applied on the training thread, reported in the state's `knobs`."""

from __future__ import annotations

import gc
import json
from typing import Any

from gpumon import protocol
from gpumon.hook.allocator import EmptyCacheCounter

MAX_ERRORS = 10
MAX_IGNORED = 32
GC_FROZEN_THRESHOLD = (50_000, 50, 100)
"""gc_freeze's collector thresholds (each at least the job's own): young collections rarer, full ones far rarer."""


class KnobState:
    """What was applied, refused and left to the script; the DataLoader knobs waiting for each loader's next iter()."""

    def __init__(self, torch: Any, empty_cache: EmptyCacheCounter | None = None) -> None:
        self.torch = torch
        self.empty_cache = empty_cache
        self.gc_freeze = GcFreeze()
        self.applied: dict[str, Any] = {}
        self.errors: list[str] = []
        self.ignored: list[str] = []
        """GPUMON_KNOBS names the hook does not know (left to a script that reads GPUMON_KNOBS itself)."""
        self.dataloader: dict[str, Any] = {}
        """DataLoader knobs, applied to each DataLoader at its next iter() (apply_dataloader_knobs)."""
        self.reapply: dict[str, Any] = {}
        """GPUMON_KNOBS applied again at the first step boundary (reapply_pending), in case the script set the same
        flags itself while building its model."""

    def apply(self, knobs: dict[str, Any]) -> None:
        """Apply validated knobs: global ones now, DataLoader ones at each DataLoader's next iter()."""
        backends = self.torch.backends
        for name, value in knobs.items():
            try:
                if name == "cudnn_benchmark":
                    backends.cudnn.benchmark = value
                elif name == "tf32":
                    backends.cuda.matmul.allow_tf32 = value
                    backends.cudnn.allow_tf32 = value
                elif name == "float32_matmul_precision":
                    self.torch.set_float32_matmul_precision(value)
                elif name == "skip_empty_cache":
                    if self.empty_cache is None:
                        raise RuntimeError("torch.cuda.empty_cache is not wrapped")
                    self.empty_cache.skip = value
                elif name == "gc_freeze":
                    self.gc_freeze.set(value)
                else:
                    self.dataloader[name] = value
                self.applied[name] = value
            except Exception as exc:  # noqa: BLE001 - a knob torch refuses is reported, not raised
                self.error(f"{name}={value!r}: {type(exc).__name__}: {exc}")

    def apply_env(self, raw: str) -> bool:
        """GPUMON_KNOBS (trial runs): applied now, and the step-boundary ones again at the first boundary. A knob the
        script reads itself (e.g. amp_bf16) is left to it and reported as ignored; a bad value of one of ours is an
        error; the others still apply. True when any applied."""
        try:
            requested = json.loads(raw)
        except ValueError as exc:
            self.error(f"GPUMON_KNOBS: {exc}")
            return False
        if not isinstance(requested, dict):
            self.error("GPUMON_KNOBS: must be a JSON object")
            return False
        knobs: dict[str, Any] = {}
        for name, value in requested.items():
            if name not in protocol.KNOBS:
                if str(name) not in self.ignored:
                    self.ignored.append(str(name)[:100])
                    del self.ignored[:-MAX_IGNORED]
                self.error(f"GPUMON_KNOBS: {name!r} is not a hook knob (left to the script)")
                continue
            try:
                knobs.update(protocol.validate_knobs({name: value}, live=False))
            except protocol.ProtocolError as exc:
                self.error(f"GPUMON_KNOBS: {exc}")
        if not knobs:
            return False
        self.apply(knobs)
        self.reapply = {k: v for k, v in knobs.items() if protocol.KNOBS[k]["applies"] == protocol.APPLIES_NEXT_STEP}
        return True

    def reapply_pending(self) -> None:
        """Apply again the GPUMON_KNOBS left for the first step boundary (`reapply`)."""
        knobs, self.reapply = self.reapply, {}
        if knobs:
            self.apply(knobs)

    def error(self, text: str) -> None:
        """Note a knob error for the state (cut at 300 characters; the last MAX_ERRORS kept)."""
        self.errors.append(text[:300])
        del self.errors[:-MAX_ERRORS]


class GcFreeze:
    """gc_freeze: the objects alive now leave the collector's generations (gc.freeze) and its thresholds go up; off,
    they come back (gc.unfreeze, unless the job had frozen objects itself) and the job's thresholds with them."""

    def __init__(self) -> None:
        self.previous: tuple[int, int, int] | None = None
        """The job's thresholds while on; None: off."""
        self.job_froze = False

    def set(self, on: bool) -> None:
        """Turn gc_freeze on (freeze what is alive now, raise the thresholds) or off (as the job had them)."""
        if on:
            if self.previous is None:
                self.previous = gc.get_threshold()
                self.job_froze = gc.get_freeze_count() > 0
            gc.freeze()  # again when already on: what the job built since (its model, at the first step) joins them
            gc.set_threshold(*(max(mine, job) for mine, job in zip(GC_FROZEN_THRESHOLD, self.previous, strict=True)))
        elif self.previous is not None:
            if not self.job_froze:
                gc.unfreeze()
            gc.set_threshold(*self.previous)
            self.previous = None


def apply_dataloader_knobs(loader: Any, knobs: dict[str, Any]) -> None:
    """Set DataLoader knobs on `loader` before an iterator is made; drops a persistent iterator that
    was built with other settings, so the next one uses the new ones."""
    changed = False
    for name in ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers"):
        if name not in knobs:
            continue
        value = knobs[name]
        if getattr(loader, name, None) != value:
            # persistent_workers may not be set through DataLoader.__setattr__ after init.
            object.__setattr__(loader, name, value)
            changed = True
    if loader.num_workers > 0 and loader.prefetch_factor is None:
        object.__setattr__(loader, "prefetch_factor", 2)
        changed = True
    if changed and getattr(loader, "_iterator", None) is not None:
        loader._iterator = None  # the old workers shut down when it is collected
