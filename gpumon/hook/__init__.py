"""gpumon's in-process hook: `import gpumon.hook` in a training script makes the job visible to gpumon.

Importing installs it (unless GPUMON_HOOK=0): once torch is imported, the hook patches DataLoader
iteration, backward and autocast entry, registers a global optimizer step hook, and serves
per-step records and job state on a private Unix socket (see gpumon.protocol and
docs/protocol.md). It never raises into the job, never blocks the training thread, never
synchronizes with the GPU and keeps bounded memory. Stdlib + torch only.

Public API:
    install(lazy=None) -> bool   install explicitly (idempotent; importing already did)
    step(samples=None)           mark a step end yourself, for loops the hook cannot see
    uninstall()                  take the patches off and stop the server
    is_installed() -> bool       whether the hook is installed in this process
    HOOK_VERSION                 gpumon's version, as the hook reports it in hello (`hook_version`)
"""

from __future__ import annotations

from gpumon import __version__ as HOOK_VERSION
from gpumon.hook.lifecycle import install, is_installed, step, uninstall

__all__ = ["HOOK_VERSION", "install", "is_installed", "step", "uninstall"]

install()
