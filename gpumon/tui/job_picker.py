"""The job picker: the hooked jobs found at start (or on `j`), one line per job or DDP group; enter attaches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from gpumon.jobs.job_info import JobGroup
from gpumon.printable import printable
from gpumon.tui.format import plural


def group_prompt(group: JobGroup) -> Text:
    """'pid 1234: python train.py --lr 3e-4' with the working directory beneath it, dim (both made printable)."""
    text = Text(printable(group.label), no_wrap=True, overflow="ellipsis")
    text.append(f"\n  {printable(group.primary.cwd)}", style="bright_black")
    return text


class JobPicker(ModalScreen[JobGroup | None]):
    """Lists hooked jobs; enter attaches the dashboard to the highlighted one, escape keeps the plain dashboard."""

    DEFAULT_CSS = """
    JobPicker {
        align: center middle;
    }
    JobPicker > Vertical {
        width: 90%;
        max-width: 120;
        height: auto;
        max-height: 80%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    JobPicker OptionList {
        height: auto;
        max-height: 20;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape",
            "dismiss(None)",
            "Plain dashboard",
            id="picker-cancel",
            tooltip="Close the list and show the machine without a job",
        ),
    ]

    def __init__(self, groups: Sequence[JobGroup]) -> None:
        super().__init__()
        self.groups = list(groups)

    def compose(self) -> ComposeResult:
        with Vertical():
            count = len(self.groups)
            yield Label(f"[b]{plural(count, 'hooked training job')}[/b] · enter: watch it · escape: plain dashboard")
            yield OptionList(*(Option(group_prompt(group), id=str(index)) for index, group in enumerate(self.groups)))

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        index = int(event.option.id or 0)
        self.dismiss(self.groups[index])
