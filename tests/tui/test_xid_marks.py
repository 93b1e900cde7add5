"""XID errors on the GPU pane's time axis: an X in the cell of the sample that first listed the error, above every
other mark, and its code on the health line."""

from __future__ import annotations

from tui_support import FakeSource, gpu, snapshot, widget_text

from gpumon.sampling.history import PROCESS_STARTED, THROTTLED, XID_ERROR
from gpumon.sampling.snapshot import XidEvent
from gpumon.tui.app import GpumonApp
from gpumon.tui.gpu_pane import GpuPane
from gpumon.tui.graph import GraphStyle, event_marks

START = 1_795_000_000.0


def test_an_xid_error_outranks_the_other_marks_of_its_cell() -> None:
    samples = [float(PROCESS_STARTED), float(XID_ERROR | THROTTLED), 0.0, float(THROTTLED)]
    marks = event_marks(samples, GraphStyle.BRAILLE.samples_per_cell)
    assert marks == [("X", "bold white on red"), ("!", "bold red")]
    blocks = GraphStyle.BLOCKS.samples_per_cell
    assert event_marks([float(XID_ERROR), 0.0], blocks) == [("X", "bold white on red"), None]


async def test_xid_errors_are_marked_on_the_time_axis_at_their_sample() -> None:
    source = FakeSource(interval=1.0)
    app = GpumonApp(source)
    earlier = XidEvent(timestamp=START - 100, xid=13)
    fell_off = XidEvent(timestamp=START + 39.5, xid=79)
    page_retire = XidEvent(timestamp=START + 51.5, xid=48)

    def xids(index: int) -> tuple[XidEvent, ...]:
        return (earlier,) + ((fell_off,) if index >= 40 else ()) + ((page_retire,) if index >= 52 else ())

    steps = [
        snapshot(
            START + index,
            gpus=(gpu(0, xid_events=xids(index), throttle_reasons=("hw_thermal",) if 50 <= index < 54 else ()),),
        )
        for index in range(60)
    ]
    async with app.run_test(size=(160, 50)) as pilot:
        source.push(*steps)
        await pilot.pause()
        text = widget_text(app.query_one(GpuPane))
        axis = next(line for line in text.splitlines() if "└" in line).split("└")[1]
        # Two samples a cell: sample i of 60 is in cell 80 - 30 + i // 2. XID 13 predates the history: no mark.
        assert axis.count("X") == 2
        assert axis[50 + 20] == "X", "XID 79 arrived with sample 40"
        assert axis[50 + 25 : 50 + 27] == "!X", "sample 52 is throttled too: the XID wins its cell"
        assert "XID 48 at" in text and "(+2)" in text, "the health line names the latest code"
