"""`c` in the job view: a torch.profiler capture of the followed job on a worker thread, its summary in a modal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpumon.advisor.capture import Capture, CaptureError, capture
from gpumon.advisor.trace_summary import summary_lines
from gpumon.jobs.client import JobClient
from gpumon.jobs.source import JobSource
from gpumon.printable import printable

if TYPE_CHECKING:
    from textual.app import App

CAPTURE_STEPS = 5
"""Steps a `c` capture covers: enough for a few of each kernel, little enough to write at once."""
CAPTURE_NEEDS_A_HOOK = "profiler capture: it needs a job with the gpumon hook (gpumon run, or import gpumon.hook)"
CAPTURE_NEEDS_A_JOB = "profiler capture: no job followed (j picks one)"
CAPTURE_RUNNING = "profiler capture: one is already running"


def hook_client(job: JobSource | None) -> JobClient | None:
    """The hook client of the job's primary rank; None for no job, or a job sampled with py-spy."""
    return job.primary if job is not None else None


class ProfileCapture:
    """Starts one capture at a time for the app and shows its summary (or its one-line failure) when done."""

    def __init__(self, app: App[Any], steps: int = CAPTURE_STEPS) -> None:
        self.app = app
        self.steps = steps
        self.running = False

    def request(self, job: JobSource | None) -> None:
        """`c`: start a capture of `job` on a worker thread, or say in one line why not."""
        if job is None:
            self.app.notify(CAPTURE_NEEDS_A_JOB, timeout=6)
            return
        client = hook_client(job)
        if client is None or client.ended:
            self.app.notify(CAPTURE_NEEDS_A_HOOK, timeout=6)
            return
        if self.running:
            self.app.notify(CAPTURE_RUNNING, timeout=4)
            return
        self.running = True
        self.app.notify(f"profiling {self.steps} steps of pid {client.pid} with torch.profiler...", timeout=4)
        self.app.run_worker(lambda: self._capture(client), thread=True, exclusive=True, group="profile")

    def _capture(self, client: JobClient) -> None:
        """On a worker thread: the capture, then its result to the UI thread."""
        outcome: Capture | str
        try:
            outcome = capture(client, self.steps)
        except CaptureError as error:
            outcome = str(error)
        except Exception as error:  # noqa: BLE001 - a worker's failure is a line on screen, never a crash
            outcome = f"profiler capture failed: {type(error).__name__}: {error}"
        self.app.call_from_thread(self._done, outcome)

    def _done(self, outcome: Capture | str) -> None:
        self.running = False
        if isinstance(outcome, str):
            self.app.notify(printable(outcome), severity="warning", timeout=10, markup=False)
            return
        self.app.push_screen(ProfileScreen(summary_lines(outcome.summary)))


class ProfileScreen(ModalScreen[None]):
    """The capture's summary; escape or q closes it. The trace's path is its first line."""

    DEFAULT_CSS = """
    ProfileScreen {
        align: center middle;
    }
    ProfileScreen > VerticalScroll {
        width: 95%;
        max-width: 160;
        height: auto;
        max-height: 90%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="profile-close", tooltip="Back to the dashboard"),
        Binding("q", "dismiss(None)", "Close", show=False, id="profile-close-q"),
    ]

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static("Profiler capture (open the trace in https://ui.perfetto.dev)", classes="title")
            yield Static("\n".join(self.lines), markup=False, id="profile-summary")
