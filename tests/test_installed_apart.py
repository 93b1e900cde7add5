"""gpumon installed once, the README's way, in a venv of its own on another Python minor version, watches a torch job
on this interpreter in a venv holding a conflicting Textual and Rich, and leaves that venv as it was.

gpumon's venv: `python3.X -m venv` of the newest other minor version (3.10+) this machine has, then `pip install`
of this checkout with its real dependencies from the package index: no torch (gpumon does not depend on it). The
job's venv: this interpreter's venv with textual 0.43 and rich 13 installed by pip, and torch through a .pth line
(torch is installed for this interpreter alone). From gpumon's venv, `gpumon run --no-tui` starts the job, then
`gpumon jobs`, `gpumon attach --json` and `gpumon diagnose --pid` find it served: the hello carries the job's pid
and Python, and steps arrive on that connection.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpumon import protocol
from tests.job_process import JobOutput
from tests.other_pythons import other_pythons
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "README.md", "gpumon", "demo")
"""What `pip install .` reads (pyproject's readme and its packages.find roots): copied so the build's own files
(build/, *.egg-info) land in a temporary directory, not in the checkout."""
JOB_TEXTUAL, JOB_RICH = "0.43.0", "13.7.0"
"""The job venv's own Textual and Rich, older than gpumon's (textual>=8, which pulls a newer Rich)."""
OTHER_PYTHONS = other_pythons()
PROBE_TIMEOUT_S = 60
INSTALL_TIMEOUT_S = 600

JOB_SCRIPT = """\
import json, os, sys, time
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 0
while not os.path.exists(os.environ["RELEASE"]):
    optimizer.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    steps += 1
    if steps == 5:
        import rich, textual
        from importlib.metadata import version
        venv = os.path.realpath(os.environ["TEST_GPUMON_VENV"]) + os.sep
        package = os.path.realpath(sys.modules["gpumon"].__path__[0]) + os.sep
        files = {name: os.path.realpath(getattr(module, "__file__", None) or "")
                 for name, module in list(sys.modules.items())}
        print(json.dumps({
            "event": "ready", "pid": os.getpid(), "version": list(sys.version_info[:2]),
            "gpumon_path": [os.path.realpath(path) for path in sys.modules["gpumon"].__path__],
            "hooked": "gpumon.hook" in sys.modules,
            "from_gpumon_venv": sorted(name for name, path in files.items()
                                       if path.startswith(venv) and not path.startswith(package)),
            "textual": [textual.__version__ if hasattr(textual, "__version__") else version("textual"),
                        os.path.realpath(textual.__file__)],
            "rich": [version("rich"), os.path.realpath(rich.__file__)],
        }), flush=True)
    time.sleep(0.01)
print(json.dumps({"event": "done", "steps": steps}), flush=True)
"""


@dataclass(frozen=True)
class Venv:
    root: Path
    python: Path
    site: Path
    version: tuple[int, int]

    @property
    def bin(self) -> Path:
        return self.root / "bin"


def _venv(interpreter: str, root: Path) -> Venv:
    subprocess.run([interpreter, "-m", "venv", str(root)], check=True, timeout=300, capture_output=True)
    python = root / "bin" / "python"
    done = subprocess.run(
        [
            str(python),
            "-c",
            "import json, sys, sysconfig; print(json.dumps([sysconfig.get_paths()['purelib'], "
            "list(sys.version_info[:2])]))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    site, version = json.loads(done.stdout)
    return Venv(root, python, Path(site), (version[0], version[1]))


def _pip(venv: Venv, *args: str, timeout: float = INSTALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv.python), "-m", "pip", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _skip_without_an_index(venv: Venv) -> None:
    """Skip when this venv's pip finds no Textual (gpumon's main dependency) on the index it is configured with."""
    try:
        done = _pip(venv, "index", "versions", "textual", "--timeout", "15", "--retries", "1", timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip("pip cannot reach a package index (no answer within 60 s)")
    if done.returncode != 0 or "Available versions" not in done.stdout:
        said = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"pip cannot reach a package index: {said[-1][:200]}")


def _installed(venv: Venv, *args: str) -> None:
    done = _pip(venv, "install", *args)
    assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _freeze(venv: Venv) -> list[str]:
    """The distributions in the venv's own site-packages (not those the torch .pth line adds to its path)."""
    done = _pip(venv, "freeze", "--all", "--path", str(venv.site), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _tree(directory: Path) -> dict[str, str]:
    """Every file under `directory` but bytecode caches (the job's own Python writes those), with its digest."""
    files = (path for path in directory.rglob("*") if path.is_file() and "__pycache__" not in path.parts)
    return {str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


@pytest.fixture(scope="module")
def gpumon_venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """gpumon installed by pip, with its dependencies from the index, in a venv of the newest other minor version."""
    if not OTHER_PYTHONS:
        pytest.skip("no Python 3.10+ of another minor version on this machine")
    base = tmp_path_factory.mktemp("gpumon-apart")
    source = base / "source"
    for name in BUILD_INPUTS:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    venv = _venv(OTHER_PYTHONS[-1], base / "gpumon-venv")
    assert venv.version != sys.version_info[:2]
    _skip_without_an_index(venv)
    _installed(venv, str(source))
    return venv


@pytest.fixture
def job_venv(tmp_path: Path, gpumon_venv: Venv) -> Venv:
    """This interpreter's venv with its own older Textual and Rich from the index; torch through a .pth line.
    After gpumon_venv, which skips when there is no other Python or no index."""
    venv = _venv(sys.executable, tmp_path / "job-venv")
    _installed(venv, f"textual=={JOB_TEXTUAL}", f"rich=={JOB_RICH}")
    torch_spec = importlib.util.find_spec("torch")
    assert torch_spec is not None and torch_spec.origin is not None
    (venv.site / "torch_elsewhere.pth").write_text(f"{Path(torch_spec.origin).parents[1]}\n")
    return venv


@pytest.fixture
def socket_dir() -> Iterator[str]:
    base = tempfile.mkdtemp(prefix="gpumon-ia-", dir="/tmp")  # short: a socket's path holds at most 107 bytes
    yield os.path.join(base, "s")
    shutil.rmtree(base, ignore_errors=True)


class GpumonRun(JobOutput):
    """`gpumon run --no-tui -- JOB` from gpumon's venv: the job's output comes through gpumon's stdout."""

    def __init__(self, gpumon: Path, job_python: Path, script: Path, env: dict[str, str], socket_dir: str) -> None:
        self.proc = subprocess.Popen(
            [str(gpumon), "run", "--no-tui", "--", str(job_python), str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=script.parent,
        )
        self.socket_dir = socket_dir

    def served(self, pid: int) -> str:
        self.socket_path = os.path.join(self.socket_dir, f"{pid}.sock")
        return self.wait_socket()


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_gpumon_in_its_own_venv_on_another_python_serves_a_job_and_leaves_the_job_venv_alone(
    gpumon_venv: Venv, job_venv: Venv, tmp_path: Path, socket_dir: str
) -> None:
    gpumon = gpumon_venv.bin / "gpumon"
    gpumon_packages = {line.split("==")[0].split(" @ ")[0].lower() for line in _freeze(gpumon_venv)}
    assert "gpumon" in gpumon_packages and "textual" in gpumon_packages
    assert "torch" not in gpumon_packages, "gpumon's install pulled torch"
    freeze_before, tree_before = _freeze(job_venv), _tree(job_venv.root)
    assert f"textual=={JOB_TEXTUAL}" in freeze_before and f"rich=={JOB_RICH}" in freeze_before
    assert not [line for line in freeze_before if line.lower().startswith("gpumon")]

    script = tmp_path / "train.py"
    script.write_text(JOB_SCRIPT)
    release = tmp_path / "release"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        protocol.SOCKET_DIR_ENV: socket_dir,
        "RELEASE": str(release),
        "TEST_GPUMON_VENV": str(gpumon_venv.root),
        "OMP_NUM_THREADS": "1",
    }

    def gpumon_says(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(gpumon), *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    run = GpumonRun(gpumon, job_venv.python, script, env, socket_dir)
    try:
        ready = run.event("ready")
        pid = ready["pid"]
        run.served(pid)

        # The job runs on this interpreter, its own Textual and Rich, and of gpumon's venv only gpumon's package.
        assert ready["version"] == list(sys.version_info[:2]) != list(gpumon_venv.version)
        assert ready["hooked"] is True
        assert ready["gpumon_path"] == [os.path.realpath(gpumon_venv.site / "gpumon")]
        assert ready["from_gpumon_venv"] == [], "the job imported gpumon's dependencies from gpumon's venv"
        assert ready["textual"] == [JOB_TEXTUAL, os.path.realpath(job_venv.site / "textual" / "__init__.py")]
        assert ready["rich"] == [JOB_RICH, os.path.realpath(job_venv.site / "rich" / "__init__.py")]

        listed: list[dict[str, Any]] = []

        def job_listed() -> bool:
            done = gpumon_says("jobs", "--socket-dir", socket_dir, "--json")
            assert done.returncode == 0, done.stderr
            listed[:] = [job for group in _json_lines(done.stdout) for job in group["jobs"] if job["pid"] == pid]
            return bool(listed)

        wait_until(job_listed, 60, f"`gpumon jobs` listing pid {pid}", interval=0.2)
        assert listed[0]["executable"] == str(job_venv.python) and listed[0]["injected"] is True
        assert tuple(int(part) for part in listed[0]["python"].split(".")[:2]) == sys.version_info[:2]

        diagnosed = gpumon_says("diagnose", "--pid", str(pid), "--duration", "1", "--json")
        assert diagnosed.returncode == 0, diagnosed.stderr
        report = json.loads(diagnosed.stdout)
        assert report["pid"] == pid and report["finding"]["source"] == "hook", report["finding"]

        # attach: the hello names the job's pid, then its steps arrive on that connection. --duration only bounds a
        # failing run; the job's end ends the stream.
        attach = subprocess.Popen(
            [str(gpumon), "attach", str(pid), "--json", "--duration", "120"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        try:
            assert attach.stdout is not None
            hello = json.loads(attach.stdout.readline() or "{}")
            assert hello.get("type") == protocol.HELLO and hello["pid"] == pid, hello
            assert hello["executable"] == str(job_venv.python) and hello["injected"] is True
            seqs: list[int] = []
            for line in attach.stdout:
                message = json.loads(line)
                if message["type"] == protocol.STEPS and message["records"]:
                    seqs = [record["seq"] for record in message["records"]]
                    break
            assert seqs and seqs == sorted(seqs) and seqs[0] >= 1, "no steps came through `gpumon attach`"
            release.touch()
            rest = attach.stdout.read()
            assert attach.wait(60) == 0, attach.stderr.read() if attach.stderr else ""
        finally:
            if attach.poll() is None:
                attach.kill()
                attach.wait()
        ended = _json_lines(rest)[-1]
        assert ended["type"] == "ended" and ended["pid"] == pid, ended

        done = run.event("done")
        assert done["steps"] >= seqs[-1]
        assert run.proc.wait(60) == 0, run.stderr()
    finally:
        release.touch()
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()

    assert _freeze(job_venv) == freeze_before
    tree_after = _tree(job_venv.root)
    changed = sorted(
        name for name in tree_before.keys() | tree_after.keys() if tree_before.get(name) != tree_after.get(name)
    )
    assert changed == [], f"the job's venv changed: {changed[:20]}"
