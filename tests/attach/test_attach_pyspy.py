"""The py-spy fallback: the classifier on stacks captured from real py-spy runs (tests/fixtures/pyspy), the target
checks, the failure messages, and the sampler on a job that exits (the data-wait end-to-end test is in
test_attach_cli.py: `gpumon attach --json` on a job without the hook)."""

from __future__ import annotations

import json
import linecache
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from attach_helpers import wait_until

from gpumon.jobs.discovery import AttachError
from gpumon.jobs.pyspy.categories import (
    BACKWARD,
    COMM,
    CUDA_SYNC,
    ELSEWHERE,
    FORWARD,
    OPTIMIZER,
    USER_CODE,
    classify,
    classify_stack,
    job_source,
)
from gpumon.jobs.pyspy.sampler import PySpySampler
from gpumon.jobs.pyspy.stacks import Frame, main_thread_stacks, parse_dump, parse_raw
from gpumon.jobs.pyspy.target import check_target, explain_pyspy_failure, find_pyspy, probe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def fixture_source(file: str, line: int) -> str:
    """Source lines of the captured target come from its copy next to the dumps (same line numbers)."""
    if os.path.basename(file) == "spy_target.py":
        return linecache.getline(str(FIXTURES / "spy_target.py"), line)
    return ""


@pytest.mark.parametrize("name", sorted(EXPECTED["dumps"]))
def test_each_captured_dump_is_put_in_the_category_its_frames_show(name: str) -> None:
    stacks = parse_dump((FIXTURES / name).read_text())
    (main,) = main_thread_stacks(stacks)
    assert main.thread_name == "MainThread" and main.frames
    assert classify_stack(main.frames, fixture_source) == EXPECTED["dumps"][name]


@pytest.mark.parametrize("name", sorted(EXPECTED["records"]))
def test_each_captured_record_is_dominated_by_its_phase(name: str) -> None:
    stacks = parse_raw((FIXTURES / name).read_text())
    main = main_thread_stacks(stacks)
    assert main and all(stack.thread_name == "MainThread" for stack in main)
    pid = main[0].thread_id
    assert main_thread_stacks(stacks, pid) == main  # the main thread's OS thread id is the pid
    counts = classify(stacks, pid, fixture_source)
    total = sum(counts.values())
    assert total >= 40  # 1 s at 50 Hz
    assert counts[EXPECTED["records"][name]] / total > 0.6, counts


def test_worker_threads_are_left_out() -> None:
    stacks = parse_dump((FIXTURES / "dump-data-0.txt").read_text())
    assert [s.thread_name for s in stacks] == ["MainThread", "QueueFeederThread", "QueueFeederThread"]
    assert len(main_thread_stacks(stacks)) == 1


def frames(*names_files: tuple[str, str]) -> list[Frame]:
    return [Frame(name, file, 10) for name, file in names_files]


def test_rules_for_stacks_no_cpu_run_can_show() -> None:
    # torch.cuda.synchronize() and an event wait exist only with CUDA: the rules, on frames as py-spy names them.
    assert classify_stack(frames(("synchronize", "torch/cuda/__init__.py"), ("main", "train.py"))) == CUDA_SYNC
    assert classify_stack(frames(("Event.synchronize", "torch/cuda/streams.py"), ("main", "train.py"))) == CUDA_SYNC
    assert classify_stack(frames(("clip_grad_norm_", "torch/nn/utils/clip_grad.py"), ("main", "t.py"))) == OPTIMIZER
    assert classify_stack(frames(("GradScaler.step", "torch/amp/grad_scaler.py"), ("main", "t.py"))) == OPTIMIZER
    # The job's own code with no torch frame below it is its own CPU work; torch.distributed is communication.
    assert classify_stack(frames(("main", "train.py"), ("<module>", "train.py"))) == USER_CODE
    assert classify_stack(frames(("all_reduce", "torch/distributed/distributed_c10d.py"), ("main", "t.py"))) == COMM
    assert classify_stack([]) == ELSEWHERE
    # Activation checkpointing recomputes the forward inside backward: that time is backward's.
    assert (
        classify_stack(
            frames(
                ("Linear.forward", "torch/nn/modules/linear.py"), ("_engine_run_backward", "torch/autograd/graph.py")
            )
        )
        == BACKWARD
    )
    assert classify_stack(frames(("Linear.forward", "torch/nn/modules/linear.py"))) == FORWARD


def test_pyspy_failures_become_one_line_messages() -> None:
    permission = explain_pyspy_failure(
        123, "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'"
    )
    assert "setcap cap_sys_ptrace+ep" in permission and "ptrace_scope" in permission and "\n" not in permission
    assert "Python" in explain_pyspy_failure(123, "Error: Failed to find python version from target process")
    assert "no process" in explain_pyspy_failure(
        123,
        "Error: Failed to get process executable name.\n\nCaused by:\n    0: No such file or directory (os error 2)",
    )


def test_a_dead_pid_and_a_non_python_pid_are_refused() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with pytest.raises(AttachError, match=f"no process with pid {proc.pid}"):
        check_target(proc.pid)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(AttachError, match=rf"pid {sleeper.pid} \(sleep\) is not a Python process"):
            check_target(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


needs_pyspy = pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed (pip install py-spy)")


def _busy_python(seconds: float) -> subprocess.Popen[str]:
    """A Python process spinning for `seconds`, returned once its interpreter runs (py-spy cannot read one that is
    still starting, which a busy machine makes likely right after the spawn)."""
    code = (
        "import time\nprint('ready', flush=True)\nend = time.monotonic() + "
        f"{seconds}\nwhile time.monotonic() < end:\n    sum(range(1000))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _probe_or_skip(pid: int) -> None:
    try:
        probe(pid)
    except AttachError as error:
        if "permission" in str(error).lower():
            pytest.skip(f"py-spy cannot attach here: {error}")
        raise


@needs_pyspy
def test_the_sampler_ends_when_the_process_exits_and_keeps_its_estimate() -> None:
    # Any Python process will do (no torch to import): a busy loop for 1.5 s.
    proc = _busy_python(1.5)
    try:
        _probe_or_skip(proc.pid)
        sampler = PySpySampler(proc.pid)
        sampler.start()
        try:
            assert wait_until(lambda: sampler.view().ended, 15)
        finally:
            sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    view = sampler.view()
    assert view.end_reason == "the process exited"
    # What was sampled stays: the job's sleep loop (an empty stack may be caught as it exits).
    assert view.samples > 0 and view.counts.get(USER_CODE, 0) + view.counts.get(ELSEWHERE, 0) == view.samples
    assert view.dominant == USER_CODE


@needs_pyspy
def test_the_native_sampler_samples_a_live_process() -> None:
    """py-spy refuses --native together with --nonblocking: a native round must leave --nonblocking out."""
    proc = _busy_python(30)
    try:
        _probe_or_skip(proc.pid)
        sampler = PySpySampler(proc.pid, native=True)
        sampler.start()
        try:
            assert wait_until(lambda: sampler.view().rounds >= 2 or sampler.view().ended, 20)
        finally:
            sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    view = sampler.view()
    assert not view.ended, view.end_reason
    assert view.native and view.samples > 0 and view.dominant == USER_CODE
    assert view.counts.get(USER_CODE, 0) + view.counts.get(ELSEWHERE, 0) == view.samples


def test_py_spy_missing_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpumon.jobs.pyspy.target as pyspy_module

    monkeypatch.setattr(pyspy_module, "find_pyspy", lambda: None)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(AttachError, match=r"py-spy is not installed: `pip install py-spy`"):
            pyspy_module.probe(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()


RUNUSER = shutil.which("runuser")


@needs_pyspy
@pytest.mark.skipif(os.geteuid() != 0 or RUNUSER is None, reason="acting as another user needs root and runuser")
def test_without_ptrace_permission_the_error_says_how_to_grant_it(shared_spy_job: Any) -> None:
    job = shared_spy_job
    pyspy = find_pyspy()
    assert pyspy is not None
    if not os.access(pyspy, os.X_OK) or (os.stat(pyspy).st_mode & 0o005) != 0o005:
        pytest.skip(f"{pyspy} is not runnable by other users")
    done = subprocess.run(
        [RUNUSER, "-u", "nobody", "--", pyspy, "dump", "--pid", str(job.pid)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    message = explain_pyspy_failure(job.pid, done.stderr + done.stdout, done.returncode)
    assert "ptrace permission denied" in message and "setcap cap_sys_ptrace+ep" in message


def test_native_cuda_waits_and_the_jobs_own_sync_lines_are_syncs() -> None:
    """py-spy --native frames in libcudart/libcuda are syncs (seen natively); a print(tensor) line of the job's own
    code under torch's formatting is a sync read from source text; the hot frame names the job's line."""
    from gpumon.jobs.pyspy.categories import SYNC_NATIVE, SYNC_SOURCE, classify_stack_how
    from gpumon.jobs.pyspy.sampler import PySpySampler
    from gpumon.jobs.pyspy.stacks import parse_raw

    lines = {
        ("/home/u/train.py", 57): "        norms.append(p.grad.norm().item())\n",
        ("/home/u/train.py", 49): "        out = model(x)\n",
        ("/home/u/train.py", 61): "    print(loss)\n",
    }
    source = lambda file, line: lines.get((file, line), "")  # noqa: E731 - the job's source, as linecache reads it
    stacks = parse_raw((FIXTURES / "record-native_sync.raw").read_text())
    found = [(classify_stack_how(stack.frames, source), stack.count) for stack in stacks]
    assert found == [
        (("cuda_sync", SYNC_NATIVE), 31),
        (("cuda_sync", SYNC_NATIVE), 9),
        (("forward", None), 12),
        (("cuda_sync", SYNC_SOURCE), 6),
    ]
    sampler = PySpySampler(5120, pyspy="/nonexistent/py-spy", source_line=source, native=True)
    sampler._take(stacks)
    view = sampler.view()
    assert view.native and view.sync_evidence == {SYNC_NATIVE: 40, SYNC_SOURCE: 6}
    assert view.hot_frames["cuda_sync"] == "main (train.py:57)"
    assert view.to_dict()["sync_evidence"] == {"native": 40, "torch": 0, "source": 6}


def test_a_python_c_jobs_own_lines_are_read_from_its_command_line(tmp_path: Path) -> None:
    """py-spy names `python -c` frames `<string>`: their text comes from the job's argv, relative files from its cwd."""
    code = "import time\nx = 1\nwhile True:\n    time.sleep(0.05)  # norms.append(p.grad.norm().item())\n"
    (tmp_path / "train.py").write_text("import torch\nloss.item()\n")
    job = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10
        source = job_source(job.pid)
        while source("<string>", 2) != "x = 1" and time.monotonic() < deadline:
            time.sleep(0.05)
            source = job_source(job.pid)
        assert source("<string>", 2) == "x = 1"
        assert source("<string>", 99) == ""
        assert source("train.py", 2).strip() == "loss.item()"
        frames = [Frame("<module>", "<string>", 4)]
        assert classify_stack(frames, source) == CUDA_SYNC
    finally:
        job.kill()
        job.wait()


def test_a_real_native_record_of_a_cuda_job_names_its_item_line() -> None:
    """A real `py-spy record --native` of a CUDA job calling .item() per parameter (H200, see the fixtures' README):
    the waits inside .item() are seen natively, the hot sync frame is the job's own line 18."""
    from gpumon.jobs.pyspy.categories import SYNC_NATIVE, SYNC_SOURCE, classify_stack_how
    from gpumon.jobs.pyspy.sampler import PySpySampler
    from gpumon.jobs.pyspy.stacks import parse_raw

    job_lines = (FIXTURES / "native_sync_job.py").read_text().splitlines(keepends=True)

    def source(file: str, line: int) -> str:
        return job_lines[line - 1] if file.endswith("native_sync_job.py") and 0 < line <= len(job_lines) else ""

    stacks = parse_raw((FIXTURES / "record-native_sync-h200.raw").read_text())
    inside_item = [stack for stack in stacks if any("THPVariable_item" in frame.name for frame in stack.frames)]
    how = [classify_stack_how(stack.frames, source) for stack in inside_item for _ in range(stack.count)]
    assert how.count(("cuda_sync", SYNC_NATIVE)) == 7 and how.count(("cuda_sync", SYNC_SOURCE)) == 2
    sampler = PySpySampler(1166, pyspy="/nonexistent/py-spy", source_line=source, native=True)
    sampler._take(stacks)
    view = sampler.view()
    assert view.native and view.hot_frames["cuda_sync"] == "main (native_sync_job.py:18)"
    assert view.sync_evidence[SYNC_NATIVE] == 7
    assert view.to_dict()["fractions"]["cuda_sync"] > 0.3


def test_another_users_job_is_never_answered_with_setcap(monkeypatch: pytest.MonkeyPatch) -> None:
    """For another user's process, setcap or ptrace_scope cannot help; say who may watch it."""
    from gpumon.jobs.pyspy import target as pyspy

    owner_uid = os.stat(f"/proc/{os.getpid()}").st_uid
    monkeypatch.setattr(pyspy.os, "geteuid", lambda: owner_uid + 12345)
    text = pyspy.explain_pyspy_failure(os.getpid(), "Error: Permission Denied")
    assert "setcap" not in text and "ptrace_scope" not in text
    assert "only its owner or root can watch it" in text
    monkeypatch.setattr(pyspy.os, "geteuid", lambda: owner_uid)
    assert "setcap" in pyspy.explain_pyspy_failure(os.getpid(), "Error: Permission Denied")
