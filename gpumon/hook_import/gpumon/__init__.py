"""gpumon for a training job's PYTHONPATH (`gpumon hook-path`): this package's modules are the installed gpumon's,
found through `__path__`, while gpumon's environment (Textual, psutil, NVML) stays off the job's path, so
`import gpumon.hook` imports the hook and the protocol (stdlib + torch) and nothing of that environment."""

import os

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__path__ = [_PACKAGE_DIR]

with open(os.path.join(_PACKAGE_DIR, "__init__.py"), encoding="utf-8") as _init:
    exec(compile(_init.read(), _init.name, "exec"))  # gpumon's own __init__: its __version__, as installed
