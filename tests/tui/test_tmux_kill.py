"""End to end in tmux: the real `python -m gpumon` in a terminal, every process shown (v), filtered (/) to a real
process tree, its parent highlighted, K, then j: the tree is gone and a sibling lives. Skips where tmux is absent."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)")
WAIT_S = 20.0
PARENT = """
import os, subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]]) for _ in range(2)]
with open(sys.argv[2] + ".tmp", "w") as out:
    out.write(" ".join(str(pid) for pid in [os.getpid(), *(child.pid for child in children)]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(300)
"""
"""The tree to kill. It is started through `setsid --fork`, so it is no child of pytest: whatever the dashboard
takes for its job, pytest (which may itself be a hooked job once a test imported gpumon.hook) is never in it."""


def _tmux(socket: str, *args: str) -> str:
    assert TMUX is not None
    return subprocess.run([TMUX, "-L", socket, *args], capture_output=True, text=True, timeout=10, check=True).stdout


def _wait(check: Callable[[], bool], what: str, screen: Callable[[], str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; the screen:\n{screen()}")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    socket = f"gpumon-test-{uuid.uuid4().hex[:8]}"
    yield socket
    subprocess.run([TMUX or "tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)


def test_kill_a_process_tree_from_the_dashboard_in_tmux(tmux_socket: str, tmp_path: Path) -> None:
    marker = f"gpumon-tmux-{uuid.uuid4().hex[:8]}"
    pids_file = tmp_path / "tree-pids"
    subprocess.run(["setsid", "--fork", sys.executable, "-c", PARENT, marker, str(pids_file)], check=True, timeout=10)
    sibling = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", marker + "-sibling"], start_new_session=True
    )
    tree: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = [int(pid) for pid in pids_file.read_text().split()]
        parent_pid = tree[0]
        environment = f"XDG_CONFIG_HOME={tmp_path} TERM=xterm-256color"
        # The pane gets its 160x50 before gpumon starts in it (a dashboard started in a fresh 80x24 pane and
        # resized a moment later was seen to stay at 80x24 under load).
        _tmux(tmux_socket, "new-session", "-d", "-x", "160", "-y", "50", "-s", "gpumon", "sleep 600")
        size = _tmux(tmux_socket, "display-message", "-p", "-t", "gpumon", "#{pane_width}x#{pane_height}").strip()
        assert size == "160x50", size
        command = f"env -u COLUMNS -u LINES {environment} {sys.executable} -m gpumon --interval 0.5"
        _tmux(tmux_socket, "respawn-pane", "-k", "-t", "gpumon", command)

        def screen() -> str:
            return _tmux(tmux_socket, "capture-pane", "-p", "-t", "gpumon")

        _wait(lambda: "Processes" in screen(), "the dashboard", screen)
        # Each key waits for the screen to show the last one took: a busy machine may not have focused the
        # filter line yet, and the marker's letters would then reach the dashboard as keys (p pauses, - slows).
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "v")
        _wait(lambda: "all processes (v)" in screen(), "the every-process view", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "/")
        _wait(lambda: "filter: command line, user or pid" in screen(), "the filter line", screen)  # its placeholder
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "-l", marker)
        _wait(lambda: f"filter '{marker}'" in screen(), "the filter to apply", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "Enter")
        _wait(lambda: all(str(pid) in screen() for pid in [*tree, sibling.pid]), "the filtered tree", screen)
        # The filter keeps the tree's ancestors (init, the shell...): move the cursor down to the parent's row.
        lines = screen().splitlines()
        header = next(index for index, line in enumerate(lines) if line.lstrip().startswith("PID"))
        row = next(index for index, line in enumerate(lines) if f" {parent_pid} " in f" {line} ") - header - 1
        assert row >= 0
        if row:
            _tmux(tmux_socket, "send-keys", "-t", "gpumon", "-N", str(row), "Down")
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "K")
        _wait(lambda: f"Send SIGKILL to process {parent_pid}?" in screen(), "the confirm step", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "j")
        _wait(lambda: all(_gone(pid) for pid in tree), "the tree to go", screen)
        assert sibling.poll() is None
        _wait(lambda: "SIGKILL sent to 3 processes" in screen(), "the outcome line", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "q")
    finally:
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(sibling.pid, signal.SIGKILL)
        sibling.wait(timeout=10)
