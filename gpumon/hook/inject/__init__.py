"""The directory `gpumon run` puts first on PYTHONPATH; its sitecustomize.py installs the hook.

The monitor side should build the environment with gpumon.protocol.injection_env (re-exported
here): importing this package imports gpumon.hook, which installs the hook in the importer.
"""

from __future__ import annotations

from gpumon.protocol import INJECT_DIR, injection_env

__all__ = ["INJECT_DIR", "injection_env"]
