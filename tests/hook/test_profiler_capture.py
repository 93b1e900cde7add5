"""ProfilerCapture with real torch on the CPU: N steps marked, the trace private and complete, and every failure a
`profile_result` with a reason, never an exception into the job."""

from __future__ import annotations

import gzip
import json
import os
import stat
import types
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import torch

from gpumon import protocol
from gpumon.hook.profiler_capture import ProfilerCapture, trace_dir_problem, trace_path


def train_step(model: torch.nn.Module) -> None:
    model(torch.randn(4, 8)).sum().backward()


def new_capture(torch_module: Any = torch) -> tuple[ProfilerCapture, deque[Any], list[BaseException]]:
    outbox: deque[Any] = deque()
    errors: list[BaseException] = []
    return ProfilerCapture(torch_module, outbox, errors.append), outbox, errors


def step_marks(path: str) -> list[str]:
    with gzip.open(path, "rt") as stream:
        events = json.load(stream)["traceEvents"]
    return [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]


def test_a_capture_marks_its_steps_and_writes_a_private_trace(tmp_path: Path) -> None:
    assert trace_dir_problem(str(tmp_path / "t")) is None
    path = trace_path(str(tmp_path / "t"), os.getpid())
    capture, outbox, errors = new_capture()
    model = torch.nn.Linear(8, 2)
    assert capture.reserve() and not capture.reserve()  # one at a time
    capture.start(3, path, "r1")
    assert capture.active
    for _ in range(3):
        train_step(model)
        capture.step()
    assert not capture.active and capture.wait_written(30)
    (result,) = outbox
    assert result["type"] == protocol.PROFILE_RESULT and result["id"] == "r1" and result["available"] is True
    assert result["steps"] == 3 and result["path"] == path and result["cuda"] is False
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and result["bytes"] == os.path.getsize(path)
    assert sorted(os.listdir(tmp_path / "t")) == [os.path.basename(path)]
    assert step_marks(path) == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert not capture.busy and errors == []


def test_stop_at_exit_writes_the_steps_captured_so_far(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir(mode=0o700)
    path = trace_path(str(tmp_path / "t"), os.getpid())
    capture, outbox, _errors = new_capture()
    capture.reserve()
    capture.start(5, path, 7)
    train_step(torch.nn.Linear(8, 2))
    capture.step()
    capture.stop()
    assert capture.wait_written(30)
    (result,) = outbox
    assert result["available"] is True and result["steps"] == 1 and result["id"] == 7


def test_a_torch_without_a_profiler_gets_a_reason(tmp_path: Path) -> None:
    no_profiler = types.SimpleNamespace(cuda=torch.cuda, autograd=types.SimpleNamespace())
    capture, outbox, _errors = new_capture(no_profiler)
    capture.reserve()
    capture.start(2, str(tmp_path / "x.json.gz"), "r2")
    (result,) = outbox
    assert result == {
        "type": protocol.PROFILE_RESULT,
        "id": "r2",
        "available": False,
        "reason": "this torch has no torch.profiler",
    }
    assert not capture.active and not capture.busy


def test_a_trace_that_cannot_be_written_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    directory.mkdir(mode=0o700)
    capture, outbox, _errors = new_capture()
    capture.reserve()
    capture.start(1, str(directory / "trace.json.gz"), "r3")
    directory.rmdir()  # gone before the export
    train_step(torch.nn.Linear(8, 2))
    capture.step()
    assert capture.wait_written(30)
    (result,) = outbox
    assert result["available"] is False and result["reason"].startswith("cannot write the trace to ")
    assert not capture.busy


def test_unusable_directories_are_named(tmp_path: Path) -> None:
    assert trace_dir_problem("relative") == "dir must be an absolute path"
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert "is a symlink" in (trace_dir_problem(str(link)) or "")
    assert "cannot create" in (trace_dir_problem(str(tmp_path / "no" / "such")) or "")


@pytest.mark.parametrize(("mode", "refusal"), [(0o755, None), (0o777, "is writable by others (mode 0777)")])
def test_an_existing_directory_is_used_as_it_is_or_refused_never_chmodded(
    tmp_path: Path, mode: int, refusal: str | None
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(mode)
    problem = trace_dir_problem(str(directory))
    assert problem == (None if refusal is None else f"cannot write the trace: {directory} {refusal}")
    assert stat.S_IMODE(directory.stat().st_mode) == mode


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_someone_elses_directory_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o755)
    os.chown(directory, 65534, 65534)
    assert f"owned by uid 65534, not {os.getuid()}" in (trace_dir_problem(str(directory)) or "")
    st = directory.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (65534, 0o755)


def test_a_symlink_planted_at_the_trace_path_is_not_followed(tmp_path: Path) -> None:
    directory = tmp_path / "t"
    directory.mkdir(mode=0o700)
    path = trace_path(str(directory), os.getpid())
    target = tmp_path / "victim"
    target.write_text("kept\n")
    os.symlink(target, path)
    capture, outbox, _errors = new_capture()
    capture.reserve()
    capture.start(1, path, "r4")
    train_step(torch.nn.Linear(8, 2))
    capture.step()
    assert capture.wait_written(30)
    (result,) = outbox
    assert result == {
        "type": protocol.PROFILE_RESULT,
        "id": "r4",
        "available": False,
        "reason": f"cannot write the trace to {path}: File exists",
    }
    assert os.readlink(path) == str(target) and target.read_text() == "kept\n"
    assert os.listdir(directory) == [os.path.basename(path)]  # no temporary file left behind
