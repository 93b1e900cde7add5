"""The knobs in effect in the training process: applied on the training thread, reported in the state's `knobs`."""

from __future__ import annotations

import json
from typing import Any

from gpumon import protocol

MAX_ERRORS = 10
MAX_IGNORED = 32


class KnobState:
    """What was applied, refused and left to the script; the DataLoader knobs waiting for each loader's next iter()."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
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
                else:
                    self.dataloader[name] = value
                self.applied[name] = value
            except Exception as exc:  # noqa: BLE001 - a knob torch refuses is reported, not raised
                self._error(f"{name}={value!r}: {type(exc).__name__}: {exc}")

    def apply_env(self, raw: str) -> bool:
        """GPUMON_KNOBS (trial runs): applied now, and the step-boundary ones again at the first boundary. A knob the
        script reads itself (e.g. amp_bf16) is left to it and reported as ignored; a bad value of one of ours is an
        error; the others still apply. True when any applied."""
        try:
            requested = json.loads(raw)
        except ValueError as exc:
            self._error(f"GPUMON_KNOBS: {exc}")
            return False
        if not isinstance(requested, dict):
            self._error("GPUMON_KNOBS: must be a JSON object")
            return False
        knobs: dict[str, Any] = {}
        for name, value in requested.items():
            if name not in protocol.KNOBS:
                if str(name) not in self.ignored:
                    self.ignored.append(str(name)[:100])
                    del self.ignored[:-MAX_IGNORED]
                self._error(f"GPUMON_KNOBS: {name!r} is not a hook knob (left to the script)")
                continue
            try:
                knobs.update(protocol.validate_knobs({name: value}, live=False))
            except protocol.ProtocolError as exc:
                self._error(f"GPUMON_KNOBS: {exc}")
        if not knobs:
            return False
        self.apply(knobs)
        self.reapply = {k: v for k, v in knobs.items() if protocol.KNOBS[k]["applies"] == protocol.APPLIES_NEXT_STEP}
        return True

    def reapply_pending(self) -> None:
        knobs, self.reapply = self.reapply, {}
        if knobs:
            self.apply(knobs)

    def _error(self, text: str) -> None:
        self.errors.append(text[:300])
        del self.errors[:-MAX_ERRORS]


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
