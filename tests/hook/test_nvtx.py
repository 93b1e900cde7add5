"""NVTX ranges (GPUMON_NVTX, `gpumon run --nvtx`): their names and nesting in a real hooked job, balanced through
exceptions; none by default; one line and no ranges when torch has no NVTX; and the range stack's own rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hook_helpers import REPO_ROOT

from gpumon import protocol
from gpumon.cli import main
from gpumon.hook import env as hook_env
from gpumon.hook.nvtx import BACKWARD, DATA_WAIT, FORWARD, MAX_OPEN, OPTIMIZER, STEP, NvtxRanges

SCRIPT = Path(__file__).parent / "jobs" / "nvtx_train.py"
DW, FW, BW, OPT = DATA_WAIT, FORWARD, BACKWARD, OPTIMIZER
NORMAL = [DW, FW, BW, OPT]
EXPECTED_STEPS = [
    NORMAL,
    [DW, FW, FW, BW, OPT],  # a forward raised (closed by the always-called forward hook), then the real one
    [DW, FW, BW, BW, OPT],  # a second backward raised
    NORMAL,
    NORMAL,
    [DW, DW, FW, BW, OPT],  # the end of epoch 1 (StopIteration) and epoch 2's first batch
    NORMAL,
    NORMAL,
    NORMAL,
    NORMAL,
    [DW],  # after the last optimizer step: epoch 2's StopIteration, closed at exit
]


def ranges_tree(lines: list[str]) -> list[tuple[str, list[Any]]]:
    """The recorded pushes and pops as a tree [(name, children)]; asserts they are balanced."""
    root: list[tuple[str, list[Any]]] = []
    stack = [root]
    for line in lines:
        event = json.loads(line)
        if event[0] == "push":
            node: tuple[str, list[Any]] = (event[1], [])
            stack[-1].append(node)
            stack.append(node[1])
        else:
            assert len(stack) > 1, "a pop without a push"
            stack.pop()
    assert len(stack) == 1, f"{len(stack) - 1} ranges left open at exit"
    return root


def job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != protocol.NVTX_ENV}
    env[protocol.SOCKET_DIR_ENV] = str(tmp_path / "s")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    return {**env, **extra}


def run_job(tmp_path: Path, env: dict[str, str], *flags: str) -> tuple[list[str], dict[str, Any], str]:
    """Run the job with `import gpumon.hook`: (event lines, summary, stderr)."""
    events, summary = tmp_path / "events", tmp_path / "summary"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(events), str(summary), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return events.read_text().splitlines(), json.loads(summary.read_text()), done.stderr


def hook_lines(stderr: str) -> list[str]:
    """The hook's own lines on the job's stderr (torch may warn there too)."""
    return [line for line in stderr.splitlines() if line.startswith("gpumon hook")]


def check_steps(lines: list[str], summary: dict[str, Any]) -> None:
    assert summary == {"steps": 10, "hook_steps": 10, "hook_errors": 0}
    tree = ranges_tree(lines)
    assert [name for name, _ in tree] == [STEP] * 11
    assert [[name for name, _ in children] for _, children in tree] == EXPECTED_STEPS
    assert all(not grandchildren for _, children in tree for _, grandchildren in children)


def test_gpumon_run_nvtx_marks_each_step_and_its_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    for name, value in job_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(protocol.NVTX_ENV, raising=False)
    events, summary = tmp_path / "events", tmp_path / "summary"
    assert main(["run", "--nvtx", "--no-tui", "--", sys.executable, str(SCRIPT), str(events), str(summary)]) == 0
    check_steps(events.read_text().splitlines(), json.loads(summary.read_text()))
    assert hook_lines(capfd.readouterr().err) == []


def test_the_launcher_sets_the_variable_only_when_asked() -> None:
    from gpumon.jobs.launch import LaunchedJob

    base = {"PATH": os.environ.get("PATH", "")}
    assert LaunchedJob(["python"], base_env=base, nvtx=True).env[protocol.NVTX_ENV] == "1"
    assert protocol.NVTX_ENV not in LaunchedJob(["python"], base_env=base).env
    assert LaunchedJob(["python"], base_env={**base, protocol.NVTX_ENV: "1"}).env[protocol.NVTX_ENV] == "1"


def test_the_env_var_turns_them_on_for_import_gpumon_hook(tmp_path: Path) -> None:
    lines, summary, stderr = run_job(tmp_path, job_env(tmp_path, **{protocol.NVTX_ENV: "1"}))
    check_steps(lines, summary)
    assert hook_lines(stderr) == []


def test_a_compiled_model_keeps_its_ranges_and_its_graph(tmp_path: Path) -> None:
    """The hooks return first thing inside a torch.compile trace: dynamo traces through them without a graph break
    (and without tripping over the module the forward range belongs to), and the outer call still gets its range."""
    lines, summary, stderr = run_job(tmp_path, job_env(tmp_path, **{protocol.NVTX_ENV: "1"}), "--compile")
    assert summary == {"steps": 10, "hook_steps": 10, "hook_errors": 0, "graph_breaks": 0}, stderr
    tree = ranges_tree(lines)
    expected = [NORMAL] * 5 + [[DW, DW, FW, BW, OPT]] + [NORMAL] * 4 + [[DW]]
    assert [[name for name, _ in children] for _, children in tree] == expected


def test_no_ranges_by_default(tmp_path: Path) -> None:
    lines, summary, _ = run_job(tmp_path, job_env(tmp_path))
    assert lines == [] and summary == {"steps": 10, "hook_steps": 10, "hook_errors": 0}


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch has NVTX")
def test_without_nvtx_in_torch_one_line_and_the_job_runs_on(tmp_path: Path) -> None:
    lines, summary, stderr = run_job(tmp_path, job_env(tmp_path, **{protocol.NVTX_ENV: "1"}), "--no-recorder")
    assert lines == [] and summary == {"steps": 10, "hook_steps": 10, "hook_errors": 0}
    assert hook_lines(stderr) == [
        "gpumon hook: NVTX ranges off: RuntimeError: NVTX functions not installed. Are you sure you have a CUDA build?"
    ]


def test_a_bad_value_is_said_once_and_leaves_them_off(tmp_path: Path) -> None:
    lines, summary, stderr = run_job(tmp_path, job_env(tmp_path, **{protocol.NVTX_ENV: "maybe"}))
    assert lines == [] and summary["hook_steps"] == 10
    assert hook_lines(stderr) == ["gpumon hook: GPUMON_NVTX='maybe' is not 1 or 0; left off"]


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    def push(self, name: str) -> int:
        if self.fail:
            raise RuntimeError("NVTX functions not installed")
        self.calls.append(name)
        return len(self.calls)

    def pop(self) -> int:
        self.calls.append("pop")
        return 0

    def torch(self) -> Any:
        return SimpleNamespace(cuda=SimpleNamespace(nvtx=SimpleNamespace(range_push=self.push, range_pop=self.pop)))


def test_closing_a_range_closes_what_was_left_open_inside_it() -> None:
    recorder = Recorder()
    ranges = NvtxRanges(recorder.torch())
    ranges.step()
    ranges.open(FORWARD)
    ranges.open(BACKWARD)  # say an exception skipped backward's close
    ranges.close(FORWARD)
    assert recorder.calls == [STEP, FORWARD, BACKWARD, "pop", "pop"] and ranges.depth == 1
    ranges.close(OPTIMIZER)  # not open: nothing
    ranges.step()
    assert recorder.calls[-2:] == ["pop", STEP] and ranges.depth == 1
    ranges.close_all()
    assert ranges.depth == 0 and recorder.calls.count("pop") == recorder.calls.count(STEP) + 2


def test_only_the_training_thread_and_a_bounded_depth() -> None:
    recorder = Recorder()
    ranges = NvtxRanges(recorder.torch())
    ranges.step()

    def from_another_thread() -> None:
        ranges.open(FORWARD)
        ranges.close(STEP)
        ranges.close_all()

    other = threading.Thread(target=from_another_thread)
    other.start()
    other.join()
    assert recorder.calls == [STEP] and ranges.depth == 0  # close_all from elsewhere forgets, pops nothing
    ranges.step()
    for _ in range(2 * MAX_OPEN):
        ranges.open(DATA_WAIT)
    assert ranges.depth == MAX_OPEN


def test_off_for_good_takes_the_forward_hooks_away() -> None:
    """After NVTX failed, module calls no longer run the hook's forward hooks; the optimizer's stay until removed."""
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optimizer_module

    hooks = (nn_module._global_forward_pre_hooks, nn_module._global_forward_hooks)
    before = [len(h) for h in hooks], len(optimizer_module._global_optimizer_pre_hooks)
    ranges = NvtxRanges(Recorder(fail=True).torch())
    removers = ranges.install(lambda: True, lambda: False)
    try:
        assert [len(h) for h in hooks] == [n + 1 for n in before[0]]
        torch.nn.Linear(2, 2)(torch.zeros(1, 2))  # the pre-hook's push fails
        assert not ranges.enabled and [len(h) for h in hooks] == before[0]
        torch.nn.Linear(2, 2)(torch.zeros(1, 2))
    finally:
        for remove in removers:
            remove()
    assert ([len(h) for h in hooks], len(optimizer_module._global_optimizer_pre_hooks)) == before


def test_a_failing_push_turns_them_off_and_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder(fail=True)
    ranges = NvtxRanges(recorder.torch())
    hook_env._said.clear()
    for _ in range(3):
        ranges.step()
        assert not ranges.open(FORWARD)
    assert not ranges.enabled and ranges.depth == 0 and recorder.calls == []
    assert capsys.readouterr().err.splitlines() == [
        "gpumon hook: NVTX ranges off: RuntimeError: NVTX functions not installed"
    ]
