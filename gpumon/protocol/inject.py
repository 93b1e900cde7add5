"""The environment `gpumon run` gives a job so that every Python process in it installs the hook."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from gpumon.protocol.knobs import KNOBS, validate_knobs
from gpumon.protocol.names import HOOK_ENV, INJECTED_ENV, KNOBS_ENV, NVTX_ENV

INJECT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hook", "inject")
"""Holds the sitecustomize.py that `gpumon run` puts first on PYTHONPATH."""


def injection_env(
    base_env: Mapping[str, str], knobs: Mapping[str, Any] | None = None, *, nvtx: bool = False
) -> dict[str, str]:
    """The environment for `gpumon run -- CMD`: every Python process started with it installs the hook
    (through INJECT_DIR/sitecustomize.py, which then runs any other sitecustomize), lazily.

    knobs: for a trial run, passed as GPUMON_KNOBS. The hook's knobs (KNOBS) are checked with
    validate_knobs(live=False); other names pass through for a script that reads GPUMON_KNOBS itself
    (the hook reports them in state.knobs.ignored).
    nvtx: the hook emits NVTX ranges (NVTX_ENV, `gpumon run --nvtx`); without it, the base environment's setting stays.
    Lives here, not in gpumon.hook, because importing gpumon.hook installs the hook in the importer.
    """
    env = dict(base_env)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != INJECT_DIR]
    env["PYTHONPATH"] = os.pathsep.join([INJECT_DIR, *parts])
    env[HOOK_ENV] = "1"
    env[INJECTED_ENV] = "1"
    if nvtx:
        env[NVTX_ENV] = "1"
    if knobs:
        ours = {name: value for name, value in knobs.items() if name in KNOBS}
        checked = {**dict(knobs), **(validate_knobs(ours, live=False) if ours else {})}
        env[KNOBS_ENV] = json.dumps(checked, separators=(",", ":"))
    else:
        env.pop(KNOBS_ENV, None)
    return env
