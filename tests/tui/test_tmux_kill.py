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
import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]]) for _ in range(2)]
print(" ".join(str(child.pid) for child in children), flush=True)
time.sleep(300)
"""


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
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, marker], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    sibling = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", marker + "-sibling"], start_new_session=True
    )
    try:
        assert parent.stdout is not None
        children = [int(pid) for pid in parent.stdout.readline().split()]
        tree = [parent.pid, *children]
        environment = f"XDG_CONFIG_HOME={tmp_path} TERM=xterm-256color"
        _tmux(
            tmux_socket,
            "new-session",
            "-d",
            "-x",
            "160",
            "-y",
            "50",
            "-s",
            "gpumon",
            f"env {environment} {sys.executable} -m gpumon --interval 0.5",
        )

        def screen() -> str:
            return _tmux(tmux_socket, "capture-pane", "-p", "-t", "gpumon")

        _wait(lambda: "Processes" in screen(), "the dashboard", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "v", "/")
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "-l", marker)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "Enter")
        _wait(lambda: all(str(pid) in screen() for pid in [*tree, sibling.pid]), "the filtered tree", screen)
        # The filter keeps the tree's ancestors (init, the shell...): move the cursor down to the parent's row.
        lines = screen().splitlines()
        header = next(index for index, line in enumerate(lines) if line.lstrip().startswith("PID"))
        row = next(index for index, line in enumerate(lines) if f" {parent.pid} " in f" {line} ") - header - 1
        assert row >= 0
        if row:
            _tmux(tmux_socket, "send-keys", "-t", "gpumon", "-N", str(row), "Down")
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "K")
        _wait(lambda: f"Send SIGKILL to process {parent.pid}?" in screen(), "the confirm step", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "j")
        _wait(lambda: parent.poll() is not None and all(_gone(pid) for pid in children), "the tree to go", screen)
        assert parent.returncode == -signal.SIGKILL
        assert sibling.poll() is None
        _wait(lambda: "SIGKILL sent to 3 processes" in screen(), "the outcome line", screen)
        _tmux(tmux_socket, "send-keys", "-t", "gpumon", "q")
    finally:
        for popen in (parent, sibling):
            try:
                os.killpg(popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            popen.wait(timeout=10)
