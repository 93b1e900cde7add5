"""Process control from the dashboard: what may be signalled here, the confirm step, and the one-line outcome.

The signalling itself is gpumon.jobs.process_signals; this module only asks and tells.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpumon.jobs.process_signals import SIGNALS, Target, job_targets, process_targets, send_signal, summary
from gpumon.printable import printable
from gpumon.tui.format import plural

READ_ONLY = "read-only: gpumon sends no signals (--read-only or read_only = true in the config file)"
REPLAY = "a replay: its processes are not running here, so gpumon sends them no signals"
TARGETS_LISTED = 8
"""The confirm step lists this many processes of a job, then says how many more."""


def _no_ranks() -> list[list[int]]:
    return []


@dataclass(slots=True)
class ProcessControl:
    """What signalling may do on this dashboard; `request` asks for a confirm, then signals."""

    read_only: bool = False
    live: bool = False
    """Signals go only to live processes, never to pids read from a recording."""
    ranks: Callable[[], list[list[int]]] = field(default=_no_ranks)
    """The pid groups (ranks) of the hooked jobs known, so a rank's job signal reaches every rank."""

    def refusal(self) -> str | None:
        """Why no signal may be sent here, or None."""
        if self.read_only:
            return READ_ONLY
        if not self.live:
            return REPLAY
        return None

    def request(self, app: App[object], signal_name: str, pid: int, head_pid: int, command: str = "") -> None:
        """Ask to send signal_name to pid or to head_pid's whole job; send it once confirmed (escape: nothing)."""
        refusal = self.refusal()
        if refusal is not None:
            app.notify(refusal, severity="error", timeout=6, markup=False)
            return
        sig = SIGNALS[signal_name]
        process = process_targets(pid)
        if not process:
            app.notify(
                f"pid {pid} is gone, or is gpumon itself or one of its parents",
                severity="warning",
                timeout=5,
                markup=False,
            )
            return
        job = job_targets(head_pid, self.ranks())
        if [target.pid for target in job] == [pid]:
            job = []

        def chosen(choice: str | None) -> None:
            targets = process if choice == "process" else job if choice == "job" else []
            if not targets:
                app.notify(f"{sig.name} not sent", timeout=3)
                return
            results = send_signal(targets, sig)
            all_sent = all(result.sent for result in results)
            app.notify(
                printable(summary(results, sig)),
                severity="information" if all_sent else "error",
                timeout=6,
                markup=False,
            )

        app.push_screen(ConfirmSignal(sig, process[0], job), chosen)


def _line(target: Target) -> str:
    note = "" if target.ours else "  (another user's: root only)"
    return f"  {target.pid:>7}  {printable(target.user):<10.10} {printable(target.command)}{note}"


class ConfirmSignal(ModalScreen[str | None]):
    """Send a signal to this process (p), to its whole job (j), or nothing (n, escape)."""

    DEFAULT_CSS = """
    ConfirmSignal {
        align: center middle;
    }
    ConfirmSignal > Vertical {
        width: 100;
        max-width: 96%;
        height: auto;
        max-height: 90%;
        border: round $error;
        background: $surface;
        padding: 0 1;
    }
    ConfirmSignal Horizontal {
        height: auto;
        margin-top: 1;
    }
    ConfirmSignal Button {
        margin-right: 2;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "choose('process')", "This process", id="confirm.process"),
        Binding("j", "choose('job')", "Whole job", id="confirm.job"),
        Binding("n,escape", "choose('')", "Cancel", id="confirm.cancel"),
    ]

    def __init__(self, sig: signal.Signals, process: Target, job: Sequence[Target] = ()) -> None:
        super().__init__()
        self.sig = sig
        self.target = process
        self.job = list(job)

    def compose(self) -> ComposeResult:
        lines = [f"Send {self.sig.name} to process {self.target.pid}?", _line(self.target)]
        if self.job:
            processes = plural(len(self.job), "process", "processes")
            lines += ["", f"or to its whole job, {processes} (launcher, ranks and their workers):"]
            lines += [_line(target) for target in self.job[:TARGETS_LISTED]]
            if len(self.job) > TARGETS_LISTED:
                lines.append(f"  … and {len(self.job) - TARGETS_LISTED} more")
        with Vertical() as box:
            box.border_title = f"{self.sig.name}: confirm"
            box.border_subtitle = (
                "p: this process · j: whole job · n / escape: cancel"
                if self.job
                else "p: this process · n / escape: cancel"
            )
            yield Static(Text("\n".join(lines), no_wrap=True, overflow="ellipsis"), id="confirm-text")
            with Horizontal():
                yield Button(f"{self.sig.name} process {self.target.pid} (p)", variant="error", id="process")
                if self.job:
                    yield Button(f"{self.sig.name} whole job: {len(self.job)} (j)", variant="error", id="job")
                yield Button("Cancel (n)", variant="primary", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "")

    def action_choose(self, choice: str) -> None:
        if choice == "job" and not self.job:
            return
        self.dismiss(choice if choice in ("process", "job") else None)
