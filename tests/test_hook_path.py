"""`gpumon hook-path`: a job in another environment imports gpumon's hook through it, and nothing else of gpumon's.

The served job runs on this interpreter (torch is installed for it alone). Jobs on the other Python minor versions
the machine has (3.10+, on PATH or under pyenv) import the hook and every module of it through hook-path; without a
torch of their own the hook waits for `import torch` there, so those jobs are not served.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon import __version__, protocol
from gpumon.jobs.connection import HookConnection
from tests.job_process import JobOutput
from tests.other_pythons import other_pythons

REPO_ROOT = Path(__file__).resolve().parents[1]
FAKE_TEXTUAL_VERSION = "0.43.0"
JOB_SCRIPT = """\
import json, os, sys, time
import gpumon.hook
heavy = sorted(name for name in ("textual", "rich", "psutil", "pynvml", "prometheus_client") if name in sys.modules)
import gpumon, textual, torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    optimizer.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
print(json.dumps({"event": "ready", "heavy": heavy, "textual": textual.__version__, "textual_file": textual.__file__,
                  "gpumon_path": list(gpumon.__path__), "gpumon_version": gpumon.__version__}), flush=True)
while not os.path.exists(os.environ["RELEASE"]):
    time.sleep(0.02)
"""


class ForeignJob(JobOutput):
    """JOB_SCRIPT run by `python` with `env`; released by the file RELEASE names."""

    def __init__(self, python: Path, script: Path, env: dict[str, str], socket_dir: str) -> None:
        self.release_path = os.path.join(socket_dir, "..", "release")
        self.proc = subprocess.Popen(
            [str(python), str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "RELEASE": self.release_path},
            cwd=script.parent,
        )
        self.socket_path = os.path.join(socket_dir, f"{self.proc.pid}.sock")

    def release(self) -> int:
        Path(self.release_path).touch()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def _gpumon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT
    )


def _tree(directory: Path) -> dict[str, bytes]:
    files = (path for path in directory.rglob("*") if path.is_file() and "__pycache__" not in path.parts)
    return {str(path.relative_to(directory)): path.read_bytes() for path in files}


@pytest.fixture
def socket_dir() -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gpumon-hp-", dir="/tmp")
    yield os.path.join(base, "s")
    shutil.rmtree(base, ignore_errors=True)


def _job_venv(root: Path, interpreter: str = sys.executable) -> tuple[Path, Path]:
    """A venv of `interpreter` without pip whose own site-packages holds a conflicting Textual; on this interpreter,
    torch comes from a .pth line after it (torch is installed for this one alone)."""
    subprocess.run([interpreter, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "textual").mkdir()
    (site / "textual" / "__init__.py").write_text(f'__version__ = "{FAKE_TEXTUAL_VERSION}"\n')
    dist_info = site / f"textual-{FAKE_TEXTUAL_VERSION}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: textual\nVersion: {FAKE_TEXTUAL_VERSION}\n")
    if interpreter == sys.executable:
        torch_spec = importlib.util.find_spec("torch")
        assert torch_spec is not None and torch_spec.origin is not None
        (site / "torch_elsewhere.pth").write_text(str(Path(torch_spec.origin).parents[1]) + "\n")
    return python, site


def _job_env(hook_path: str) -> dict[str, str]:
    """This environment as a job in another venv would have it: no venv of ours, gpumon only through hook-path."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env | {"PYTHONPATH": hook_path}


def test_hook_path_holds_only_a_gpumon_package() -> None:
    done = _gpumon("hook-path")
    assert done.returncode == 0, done.stderr
    directory = Path(done.stdout.strip())
    assert done.stdout.count("\n") == 1 and directory.is_dir()
    assert {entry.name for entry in directory.iterdir()} - {"__pycache__"} == {"__init__.py", "gpumon"}


def test_a_job_in_another_venv_imports_the_hook_through_hook_path(tmp_path: Path, socket_dir: str) -> None:
    python, site = _job_venv(tmp_path / "job-venv")
    textual_before = _tree(site / "textual") | _tree(site / f"textual-{FAKE_TEXTUAL_VERSION}.dist-info")
    script = tmp_path / "train.py"
    script.write_text(JOB_SCRIPT)
    hook_path = _gpumon("hook-path").stdout.strip()
    env = _job_env(hook_path) | {protocol.SOCKET_DIR_ENV: socket_dir, "OMP_NUM_THREADS": "1"}
    job = ForeignJob(python, script, env, socket_dir)
    try:
        ready = job.event("ready")
        with HookConnection(job.wait_socket()) as conn:
            assert conn.hello["pid"] == job.proc.pid
            state = conn.request({"type": protocol.GET_STATE, "id": "s"}, (protocol.STATE,))
            assert state["type"] == protocol.STATE and state["last_seq"] >= 4, state
        assert ready["heavy"] == [], "gpumon.hook imported gpumon's dependencies"
        assert ready["gpumon_path"] == [str(REPO_ROOT / "gpumon")]
        assert ready["gpumon_version"] == __version__
        assert ready["textual"] == FAKE_TEXTUAL_VERSION
        assert Path(ready["textual_file"]).resolve() == (site / "textual" / "__init__.py").resolve()
        assert job.release() == 0, job.stderr()
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
    assert _tree(site / "textual") | _tree(site / f"textual-{FAKE_TEXTUAL_VERSION}.dist-info") == textual_before


IMPORT_EVERY_HOOK_MODULE = """\
import importlib, json, pkgutil, sys
import gpumon.hook
import gpumon, textual
names = [module.name for module in pkgutil.walk_packages(gpumon.hook.__path__, "gpumon.hook.")]
for name in names:
    importlib.import_module(name)
heavy = sorted(name for name in ("torch", "textual.app", "rich", "psutil", "pynvml") if name in sys.modules)
print(json.dumps({"version": list(sys.version_info[:2]), "modules": len(names), "heavy": heavy,
                  "installed": gpumon.hook.is_installed(), "gpumon_path": list(gpumon.__path__),
                  "textual": textual.__version__}))
"""


OTHER_PYTHONS = other_pythons()


@pytest.mark.skipif(not OTHER_PYTHONS, reason="no Python 3.10+ of another minor version on this machine")
@pytest.mark.parametrize("interpreter", OTHER_PYTHONS)
def test_a_job_on_another_python_imports_every_hook_module_through_hook_path(interpreter: str, tmp_path: Path) -> None:
    python, _site = _job_venv(tmp_path / "job-venv", interpreter)
    done = subprocess.run(
        [str(python), "-c", IMPORT_EVERY_HOOK_MODULE],
        capture_output=True,
        text=True,
        timeout=60,
        env=_job_env(_gpumon("hook-path").stdout.strip()),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["version"] != list(sys.version_info[:2])
    assert report["modules"] >= 20 and report["installed"] is True
    assert report["heavy"] == [], "the hook imported torch or gpumon's dependencies on its own"
    assert report["gpumon_path"] == [str(REPO_ROOT / "gpumon")]
    assert report["textual"] == FAKE_TEXTUAL_VERSION
