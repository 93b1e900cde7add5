"""The dashboard with the advisor: GpumonApp that owns an Advisor (gpumon/tui/advisor_component.py) and binds its
keys (`a` the panel, `g` the guided run, ctrl+c quits and stops what it started)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.binding import BindingType

from gpumon.sampling.source import SnapshotSource
from gpumon.tui import keys
from gpumon.tui.advisor_component import (
    DIAGNOSE_EVERY_S,
    Advisor,
    DemoOwner,
    LoggingSource,
    RunnerFactory,
)
from gpumon.tui.app import GpumonApp

__all__ = ["AdvisorApp", "DemoOwner", "LoggingSource"]


class AdvisorApp(GpumonApp):
    """GpumonApp with the advisor's keys, owning `advisor` (its panel, diagnosis and guided run) over its source.

    owner: the demo the app started (trial runs then run its command); show_advisor: the panel visible at start;
    runner_factory: overrides how the guided run's runner is made; notice: said once at start.
    """

    BINDINGS: ClassVar[list[BindingType]] = list(keys.bindings(advisor=True))

    def __init__(
        self,
        source: SnapshotSource,
        *,
        owner: DemoOwner | None = None,
        show_advisor: bool = True,
        runner_factory: RunnerFactory | None = None,
        diagnose_every: float = DIAGNOSE_EVERY_S,
        notice: str | None = None,
        **kwargs: Any,
    ) -> None:
        advisor = Advisor(
            owner=owner, show=show_advisor, runner_factory=runner_factory, diagnose_every=diagnose_every, notice=notice
        )
        super().__init__(advisor.logging(source), extension=advisor, **kwargs)
        self.advisor = advisor
