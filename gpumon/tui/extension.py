"""What the dashboard owns besides its panes: an Extension (the advisor, gpumon/tui/advisor_component.py) adds widgets,
starts and stops with the app and answers the actions the app has no method for (the key table's a and g); without
one, AdvisorElsewhere answers a and g by saying where the advisor is."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from gpumon.tui.keys import Where

if TYPE_CHECKING:
    from textual.widget import Widget

    from gpumon.tui.app import GpumonApp

ADVISOR_NEEDS_A_JOB = "the advisor needs a job: gpumon run -- python train.py … or gpumon attach PID"
EXTENSION_ACTIONS = ("toggle_advisor", "guided")
"""The key table's actions that no app method runs: the extension's."""


class Extension(Protocol):
    """The hooks GpumonApp calls on the extension it owns."""

    keys: Where
    """Which of the key table's sets its keys are (Where.ADVISOR, Where.PLAIN): the help lists their lines."""

    def widgets(self) -> Iterable[Widget]:
        """Mounted after the dashboard's own (at compose)."""
        ...

    def start(self, app: GpumonApp) -> None:
        """The app is mounted (called before the app's own start)."""
        ...

    def stop(self) -> None:
        """The app is closing (called before its source and job stop)."""
        ...

    def run_action(self, action: str) -> bool:
        """Run one of EXTENSION_ACTIONS; False for any other action."""
        ...


class AdvisorElsewhere:
    """The plain dashboard's extension: a and g say where the advisor is."""

    keys = Where.PLAIN

    def __init__(self) -> None:
        self._app: GpumonApp | None = None

    def widgets(self) -> Iterable[Widget]:
        return ()

    def start(self, app: GpumonApp) -> None:
        self._app = app

    def stop(self) -> None:
        pass

    def run_action(self, action: str) -> bool:
        app = self._app
        if app is None or action not in EXTENSION_ACTIONS:
            return False
        job = app.job
        if job is None:
            where = ADVISOR_NEEDS_A_JOB
        else:
            where = f"the advisor is in gpumon attach {job.view().pid}, not this plain dashboard (a and g work there)"
        app.notify(where, timeout=6)
        return True
