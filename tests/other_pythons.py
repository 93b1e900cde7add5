"""The Python interpreters of other minor versions (3.10+) this machine has, for the tests that run gpumon on them."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys


def other_pythons() -> list[str]:
    """Interpreters of Python 3.10+ minor versions other than this one's that run here: on PATH, else under pyenv."""
    found: dict[tuple[int, int], str] = {}
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for minor in range(10, 16):
        if minor == sys.version_info.minor:
            continue
        candidates = [shutil.which(f"python3.{minor}") or ""]
        candidates += sorted(glob.glob(os.path.join(pyenv_root, "versions", f"3.{minor}.*", "bin", f"python3.{minor}")))
        for candidate in filter(None, candidates):
            try:
                done = subprocess.run(
                    [candidate, "-c", "import sys; print(*sys.version_info[:2])"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
            except (OSError, subprocess.SubprocessError):
                continue
            if done.returncode == 0 and done.stdout.split() == ["3", str(minor)]:
                found[(3, minor)] = candidate
                break
    return [found[version] for version in sorted(found)]
