"""gpumon on the other Python minor versions it supports (3.10+): every module imports there, or needs only a
third-party package that interpreter lacks (Textual, psutil, nvidia-ml-py, torch...), so the code itself holds no
syntax, pattern or stdlib call of a newer Python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.other_pythons import other_pythons

REPO_ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = ("textual", "psutil", "pynvml", "prometheus_client", "rich", "torch")
IMPORT_EVERY_MODULE = f"""\
import importlib, json, pkgutil, sys
import gpumon

THIRD_PARTY = {THIRD_PARTY!r}


def missing_third_party(exc):
    return isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in THIRD_PARTY


names, failed, needs = [], [], []
def walk(path, prefix):
    for info in pkgutil.iter_modules(path, prefix):
        if info.name.endswith("__main__") or info.name.startswith("gpumon.hook_import"):
            continue
        names.append(info.name)
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:
            (needs if missing_third_party(exc) else failed).append([info.name, repr(exc)])
            continue
        if info.ispkg:
            walk(module.__path__, info.name + ".")
walk(gpumon.__path__, "gpumon.")
print(json.dumps({{"version": list(sys.version_info[:2]), "modules": len(names), "failed": failed, "needs": needs}}))
"""

OTHER_PYTHONS = other_pythons()


@pytest.mark.skipif(not OTHER_PYTHONS, reason="no Python 3.10+ of another minor version on this machine")
@pytest.mark.parametrize("interpreter", OTHER_PYTHONS)
def test_each_module_imports_on_another_python_or_needs_a_missing_package(interpreter: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [interpreter, "-I", "-c", f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); exec(sys.stdin.read())"],
        input=IMPORT_EVERY_MODULE,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["version"] != list(sys.version_info[:2])
    assert report["failed"] == [], report["failed"]
    imported = report["modules"] - len(report["needs"])
    assert imported >= 100, f"only {imported} of {report['modules']} modules imported: {report['needs'][:5]}"
