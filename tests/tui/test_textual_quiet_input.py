"""The quiet input driver (gpumon.tui._textual_compat.quiet_input; on the Textual versions in CHECKED):
on a real pseudo-terminal it delivers keys and a lone Escape, exits promptly, and its input thread does not wake
while no input comes."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from gpumon.tui import _textual_compat

if not _textual_compat.ACTIVE:
    pytest.skip("the quiet input driver is off with a Textual outside CHECKED", allow_module_level=True)

APP = r"""
import sys, threading
from textual.app import App
from textual.driver import Driver
from textual.widgets import Static
from gpumon.tui._textual_compat.quiet_input import driver_class

log = open(sys.argv[1], "a", buffering=1)


class KeyLog(App[None]):
    def get_driver_class(self) -> type[Driver]:
        return driver_class(super().get_driver_class())

    def compose(self):
        yield Static("keys")

    def on_mount(self) -> None:
        log.write(f"driver {type(self._driver).__name__}\n")
        self.call_after_refresh(self.ready)

    def ready(self) -> None:
        for thread in threading.enumerate():
            if thread.name == "textual-input":
                log.write(f"input-thread {thread.native_id}\n")
        log.write("ready\n")

    def on_key(self, event) -> None:
        log.write(f"key {event.key}\n")
        if event.key == "q":
            self.exit()


KeyLog().run()
log.write("exited\n")
"""


def _wait_for(log: Path, text: str, seconds: float = 20.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        content = log.read_text() if log.exists() else ""
        if text in content:
            return content
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the app's log within {seconds} s: {content!r}")


def _runs(tid: str) -> int:
    """How many times the thread has been scheduled onto a CPU (the third field of its schedstat)."""
    with open(f"/proc/{tid}/schedstat") as stream:
        return int(stream.read().split()[2])


def test_keys_escape_and_exit_on_a_real_terminal_without_idle_wakes(tmp_path: Path) -> None:
    log = tmp_path / "keys.log"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", APP, str(log)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
    )
    os.close(slave)
    os.set_blocking(master, False)

    def drain() -> None:
        try:
            while os.read(master, 65536):
                pass
        except OSError:
            pass

    try:
        content = _wait_for(log, "ready")
        assert "driver QuietLinuxDriver" in content
        input_thread = next(line.split()[1] for line in content.splitlines() if line.startswith("input-thread"))
        task = f"{process.pid}/task/{input_thread}"
        before = _runs(task)
        for _ in range(20):  # 2 s of no input: Textual's own driver would wake 20 times
            drain()
            time.sleep(0.1)
        assert _runs(task) - before <= 2

        os.write(master, b"a")
        _wait_for(log, "key a")
        os.write(master, b"\x1b")  # a lone Escape is only known as one when the escape timeout passes
        _wait_for(log, "key escape")
        os.write(master, b"q")
        deadline = time.monotonic() + 10
        while process.poll() is None and time.monotonic() < deadline:
            drain()
            time.sleep(0.05)
        assert process.poll() == 0
        assert "exited" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
