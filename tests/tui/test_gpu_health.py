"""The GPU health line and MIG gauges (gpumon/tui/gpu_health.py), alone and in the GPU pane."""

from __future__ import annotations

import re
from pathlib import Path

from tui_support import GIB, gpu, snapshot

from gpumon.sampling.history import History
from gpumon.sampling.recording import read_recording
from gpumon.sampling.replay import Replayer
from gpumon.sampling.snapshot import MigSample, XidEvent
from gpumon.tui.app import GpumonApp
from gpumon.tui.gpu_health import DRAWN_FROM, draw_health_lines, health_lines
from gpumon.tui.gpu_pane import gpu_lines, transfer_text

HEALTHY = dict(
    nvlink_rx=1.5e9,
    nvlink_tx=0.5e9,
    ecc_corrected_volatile=0,
    ecc_uncorrected_volatile=0,
    ecc_corrected_aggregate=41,
    ecc_uncorrected_aggregate=0,
    remapped_rows_correctable=0,
    remapped_rows_uncorrectable=0,
    remapped_rows_pending=False,
    remapped_rows_failed=False,
    xid_events=(),
    energy_total=2_500_000.0,
    mig_mode=False,
)


def test_a_sample_without_health_figures_adds_no_line() -> None:
    """Recordings made before the health fields, and the screenshots built from them, stay as they were."""
    assert health_lines(gpu(0), 160) == []


def test_the_health_line_shows_each_figure_and_n_a_where_unsupported() -> None:
    (line,) = health_lines(gpu(0, **HEALTHY), 160)
    assert line.plain == "  NVLink ↓1.5GB/s ↑500MB/s  ECC 0/0 life 41/0  remap 0/0  XID none  fan N/A  energy 2.5MJ"
    assert line.cell_len <= 160

    (bare,) = health_lines(gpu(0, energy_total=10.0), 160)
    assert bare.plain == "  NVLink N/A  ECC N/A  remap N/A  XID N/A  fan N/A  energy 10J"


def test_link_rates_read_in_decimal_units_on_the_health_line_and_in_the_header() -> None:
    """The unit the README, the exporter (bytes/s) and --dcgm-names (MB/s) use, written whole: not GiB/s as 'G/s'."""
    sample = gpu(0, nvlink_rx=131e9, nvlink_tx=37.5e9, pcie_rx=70.8e6, pcie_tx=1.1e9)
    (line,) = health_lines(sample, 160)
    assert line.plain.startswith("  NVLink ↓131GB/s ↑37.5GB/s  ")
    assert transfer_text(sample).plain.endswith("PCIe ↓70.8MB/s ↑ 1.1GB/s")
    assert transfer_text(gpu(0, pcie_rx=None, pcie_tx=None)).plain.endswith("PCIe ↓     N/A ↑     N/A"), (
        "8 cells a figure"
    )


def test_the_pcie_link_shows_what_it_runs_at_and_what_it_could_where_less() -> None:
    (full,) = health_lines(
        gpu(0, **HEALTHY, pcie_link_gen=5, pcie_link_width=16, pcie_link_gen_max=5, pcie_link_width_max=16), 160
    )
    assert "XID none  PCIe Gen5x16  fan N/A" in full.plain

    (idle,) = health_lines(
        gpu(0, **HEALTHY, pcie_link_gen=1, pcie_link_width=16, pcie_link_gen_max=5, pcie_link_width_max=16), 160
    )
    assert "PCIe Gen1x16/5x16" in idle.plain
    assert not any(span.style == "yellow" for span in idle.spans), "a generation stepped down at idle is normal"

    (narrow,) = health_lines(
        gpu(0, **HEALTHY, pcie_link_gen=5, pcie_link_width=8, pcie_link_gen_max=5, pcie_link_width_max=16), 160
    )
    flagged = {narrow.plain[span.start : span.end] for span in narrow.spans if span.style == "yellow"}
    assert flagged == {"Gen5x8/5x16"}, "missing lanes stand out"


def test_a_narrow_health_line_drops_whole_items_never_cuts_a_figure() -> None:
    sample = gpu(0, **HEALTHY, pcie_link_gen=5, pcie_link_width=16, pcie_link_gen_max=5, pcie_link_width_max=16)
    (wide,) = health_lines(sample, 160)
    assert wide.plain.endswith("fan N/A  energy 2.5MJ")
    cut = len(wide.plain) - 3  # "energy 2." would fit, the whole figure does not
    (narrow,) = health_lines(sample, cut)
    assert narrow.plain.endswith("PCIe Gen5x16  fan N/A") and "energy" not in narrow.plain


def test_errors_stand_out() -> None:
    xids = (XidEvent(1_795_000_000.0, 48), XidEvent(1_795_000_100.0, 79))
    (line,) = health_lines(
        gpu(0, **{**HEALTHY, "ecc_uncorrected_volatile": 2, "remapped_rows_failed": True, "xid_events": xids}), 200
    )
    assert "ECC 0/2" in line.plain and "remap 0/0 FAILED" in line.plain
    assert "XID 79 at 11:08:20 (+1)" in line.plain  # TZ=UTC (conftest)
    alarms = {line.plain[span.start : span.end] for span in line.spans if span.style == "bold white on red"}
    assert {"0/2", " FAILED", "79 at 11:08:20 (+1)"} <= alarms


def test_retired_pages_where_rows_are_not_remapped() -> None:
    (line,) = health_lines(gpu(0, retired_pages=3, retired_pages_pending=True), 160)
    assert "retired 3 pending reset" in line.plain


def test_each_mig_instance_is_its_own_gauge_wrapped_to_the_width() -> None:
    instances = tuple(
        MigSample(index=slot, name="NVIDIA H100 80GB HBM3 MIG 1g.10gb", memory_used=slot * GIB, memory_total=10 * GIB)
        for slot in range(7)
    )
    lines = health_lines(gpu(0, **{**HEALTHY, "mig_mode": True, "mig_instances": instances}), 80)
    gauges = [line.plain for line in lines[1:]]
    assert len(gauges) >= 3 and all(len(text) <= 80 for text in gauges)
    joined = " ".join(gauges)
    assert joined.count("1g.10gb") == 7 and " 0%" in joined and "60%" in joined


def test_a_hostile_mig_name_is_shown_printable() -> None:
    hostile = MigSample(index=0, name="MIG \x1b[2J", memory_used=1, memory_total=2)
    lines = health_lines(gpu(0, mig_mode=True, mig_instances=(hostile,)), 80)
    assert "\x1b" not in "".join(line.plain for line in lines) and "\\x1b" in lines[-1].plain


def test_the_gpu_pane_shows_health_under_the_header_and_still_fits() -> None:
    history = History()
    shot = snapshot(gpus=(gpu(0, **HEALTHY), gpu(1, **HEALTHY)))
    history.add(shot)
    lines = gpu_lines(shot, history, 160, max_lines=30)
    texts = [line.plain for line in lines]
    assert sum(1 for text in texts if text.startswith("  NVLink ")) == 2
    assert len(lines) <= 30


async def test_a_real_h200_recording_shows_its_health_line_on_the_dashboard() -> None:
    """Recorded on an H200 (driver 580) on 2026-11-23 under benchmarks/training_load.py."""
    path = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "h200-training-health.jsonl"
    snapshots = read_recording(path)
    assert snapshots[-1].gpus[0].energy_total is not None, "the H200 reports its energy counter"
    source = Replayer(snapshots[-6:], speed=32, name=path.name)
    app = GpumonApp(source)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if source.finished and app.snapshot is not None and app.snapshot.timestamp == snapshots[-1].timestamp:
                break
        svg = app.export_screenshot()
    screen = "".join(re.findall(r">([^<]*)</text>", svg)).replace("&#160;", " ")
    for shown in ("NVLink N/A", "ECC 0/0 life 0/0", "remap 0/0", "XID none", "energy 4"):
        assert shown in screen, shown


class _ReadRecorder:
    """A GpuSample stand-in that records which fields are read."""

    def __init__(self, sample: object) -> None:
        self._sample = sample
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> object:
        self.read.add(name)
        return getattr(self._sample, name)


def test_the_health_lines_kept_between_frames_are_keyed_on_every_field_they_are_drawn_from() -> None:
    """health_lines keeps its lines per DRAWN_FROM values: a field read in drawing but missing from the key would show
    stale health. Every field the drawing reads must be in the key, for healthy, failing and MIG samples."""
    failing = dict(
        HEALTHY,
        ecc_uncorrected_volatile=2,
        remapped_rows_pending=True,
        remapped_rows_failed=True,
        retired_pages=3,
        retired_pages_pending=True,
        xid_events=(XidEvent(timestamp=1_795_000_000.0, xid=79),),
        fan_speed=55.0,
    )
    mig = dict(
        HEALTHY,
        mig_mode=True,
        mig_instances=(MigSample(index=0, name="MIG 1g.18gb", memory_used=GIB, memory_total=18 * GIB),),
    )
    retired = dict(failing, remapped_rows_correctable=None, remapped_rows_uncorrectable=None)  # pre-Ampere
    for fields in (HEALTHY, failing, retired, mig):
        recorder = _ReadRecorder(gpu(0, **fields))
        draw_health_lines(recorder, 160)  # type: ignore[arg-type]  # a recorder in a GpuSample's place
        assert recorder.read <= set(DRAWN_FROM), recorder.read - set(DRAWN_FROM)


def test_kept_health_lines_follow_a_changed_field_and_are_copies() -> None:
    first = health_lines(gpu(0, **HEALTHY), 160)
    again = health_lines(gpu(0, **HEALTHY, utilization_gpu=12.0), 160)
    assert [line.plain for line in again] == [line.plain for line in first]
    assert again[0] is not first[0], "callers may change their lines"
    changed = health_lines(gpu(0, **dict(HEALTHY, ecc_uncorrected_volatile=1)), 160)
    assert changed[0].plain != first[0].plain
