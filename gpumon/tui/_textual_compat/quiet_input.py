"""A Textual workaround: an input thread that sleeps until input (checked on the Textual versions in CHECKED).

What it replaces, and why: `LinuxDriver.run_input_thread` wakes ten times a second (`select(0.1)`) to check for
exit and for an escape sequence's timeout, with or without input. On the GPU machines (virtual machines) each wake
costs 60-140 us of CPU, about 0.14% of a core in all: a seventh of what the whole dashboard costs at 1 s
(benchmarks/dashboard_threads.py measures it per thread). `QuietLinuxDriver` waits without a timeout unless the parser
holds a partial escape sequence (then until that sequence's deadline), and `disable_input` wakes it through a pipe.

It reads Textual internals that may change in any release (`Parser._timeout_time`, `LinuxDriver.exit_event`,
`fileno` and `run_input_thread`'s event processing), so it is used only with the Textual version it was written
against: `driver_class` hands back Textual's own driver with any other. tests/tui/test_textual_compat.py
checks it is off outside CHECKED; tests/tui/test_textual_quiet_input.py checks keys, a lone
Escape, exit and the absence of idle wakes on a real pty.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver


class _WakingEvent(threading.Event):
    """An Event whose set() also writes a byte to a pipe, so a thread blocked in select() sees it at once."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        if self._wake_fd < 0:
            return
        try:
            os.write(self._wake_fd, b"x")
        except OSError:  # the pipe is full: a wake is already pending
            pass

    def detach(self) -> None:
        """Stop writing to the pipe (before it is closed, so a reused descriptor number is never written to)."""
        self._wake_fd = -1


class QuietLinuxDriver(LinuxDriver):
    """LinuxDriver whose input thread runs only when there is input, an escape timeout, or exit."""

    def __init__(self, app: App[object], **options: Any) -> None:
        super().__init__(app, **options)
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._waking_event = _WakingEvent(self._wake_write)
        self.exit_event = self._waking_event

    def run_input_thread(self) -> None:
        _drain(self._wake_read)
        selector = selectors.SelectSelector()  # as Textual's: kqueue cannot watch a terminal on macOS
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            while not self.exit_event.is_set():
                deadline = parser._timeout_time
                timeout = None if deadline is None else max(0.0, deadline - get_time())
                for key, _ in selector.select(timeout):
                    if key.fd == self._wake_read:
                        _drain(self._wake_read)
                        continue
                    data = decode(os.read(self.fileno, 1024 * 4))
                    if not data:  # end of input (a pipe): stop watching it rather than spin on it
                        selector.unregister(self.fileno)
                        continue
                    for event in parser.feed(data):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()
            try:
                for _event in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def close(self) -> None:
        super().close()
        self._waking_event.detach()
        for fd in (self._wake_read, self._wake_write):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_read = self._wake_write = -1


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 64):
            pass
    except OSError:
        pass


def driver_class(default: type[Driver]) -> type[Driver]:
    """The driver an app should run with: the quiet one where Textual would use its plain LinuxDriver."""
    return QuietLinuxDriver if default is LinuxDriver else default
