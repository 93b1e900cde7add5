"""What a newcomer meets first: the help lists every key that works, `a` and `g` say where the advisor is, the
header says the interval once, only GPU processes count as on the GPU, and an 80x24 job view keeps a line for the
CPU and disks and a footer that fits."""

from __future__ import annotations

from dataclasses import replace

from screen_text import screen_rows
from test_job_app import LIVE, FakeJob, job_snapshot
from textual.widgets import Static
from tui_support import FakeSource, process, snapshot, widget_text

from gpumon.sampling.sampler import Sampler
from gpumon.sampling.snapshot import DiskSample
from gpumon.tui.advisor_app import AdvisorApp
from gpumon.tui.app import GpumonApp
from gpumon.tui.extension import ADVISOR_NEEDS_A_JOB
from gpumon.tui.help_screen import HelpScreen
from gpumon.tui.key_bar import KeyBar
from gpumon.tui.machine_line import MachineLine
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.title_bar import TitleBar


def help_keys(app: GpumonApp) -> str:
    screen = app.screen
    assert isinstance(screen, HelpScreen)
    return widget_text(screen.query_one("#help-keys", Static))


async def test_help_lists_a_and_g_where_they_work() -> None:
    app = AdvisorApp(FakeSource(), job=FakeJob(LIVE), show_advisor=False)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        keys = help_keys(app)
    assert "advisor panel" in keys and "guided run" in keys
    async with GpumonApp(FakeSource()).run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        plain = help_keys(pilot.app)
        assert "they need a job" in plain and "a g" in plain  # listed, with where the advisor runs


async def test_a_and_g_on_the_plain_dashboard_say_the_advisor_needs_a_job() -> None:
    app = GpumonApp(FakeSource())
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("a", "g"):
            await pilot.press(key)
            await pilot.pause()
        messages = [str(notification.message) for notification in app._notifications]
    assert messages == [ADVISOR_NEEDS_A_JOB, ADVISOR_NEEDS_A_JOB]
    assert "gpumon run --" in ADVISOR_NEEDS_A_JOB and "gpumon attach PID" in ADVISOR_NEEDS_A_JOB


async def test_the_header_says_the_live_interval_once() -> None:
    live = Sampler(interval=1.0).description  # the live sampler's own words, never started here
    source = FakeSource(live=True, description=live, interval=1.0)
    app = GpumonApp(source)
    async with app.run_test(size=(100, 30)) as pilot:
        source.push(snapshot())
        await pilot.pause()
        sub_title = app.query_one(TitleBar).sub_title
    assert sub_title.count("every") == 1 and sub_title == f"{live} · every 1s"
    replay = FakeSource(description="replay of run.jsonl", interval=0.5)
    async with GpumonApp(replay).run_test(size=(100, 30)) as pilot:
        replay.push(snapshot())
        await pilot.pause()
        assert pilot.app.query_one(TitleBar).sub_title == "replay of run.jsonl · every 0.5s"


async def test_a_cpu_only_job_is_not_counted_on_the_gpu() -> None:
    source = FakeSource()
    on_gpu = process(100, gpu_indices=(0,), gpu_memory=1 << 30)
    cpu_only = process(200, command="python cpu_job.py")
    async with GpumonApp(source).run_test(size=(100, 30)) as pilot:
        source.push(snapshot(processes=(on_gpu, cpu_only)))
        await pilot.pause()
        table = pilot.app.query_one(ProcessTable)
        assert table.row_count == 2
        assert str(table.border_title).startswith("Processes · 1 on GPU ·")
        source.push(snapshot(timestamp=1_795_000_001.0, processes=(cpu_only,)))
        await pilot.pause()
        assert str(table.border_title).startswith("Processes · 0 on GPU ·")


async def test_the_80x24_job_view_keeps_a_cpu_and_disk_line_and_a_footer_that_fits() -> None:
    source, job = FakeSource(), FakeJob(LIVE)
    disks = (DiskSample(name="nvme0n1", read_bytes_per_s=512 * 1024**2, write_bytes_per_s=0.0),)
    app = AdvisorApp(source, job=job, show_advisor=False)
    async with app.run_test(size=(80, 24)) as pilot:
        machine = replace(job_snapshot(LIVE, disks=disks), cpu=replace(job_snapshot(LIVE).cpu, iowait=12.0))
        source.push(machine)
        await pilot.pause()
        line = app.query_one(MachineLine)
        assert line.region.height == 1 and line.region.bottom <= 23
        text = widget_text(line)
        assert text.startswith("CPU 25%") and "iowait 12%" in text and "mem 8.0G/64.0G" in text
        assert "Disk R 512M/s W 0B/s" in text
        bar = app.query_one(KeyBar)
        drawn = {key.key.key: key for key in bar.drawn}
        assert {"q", "p", "s", "question_mark", "a", "g"} <= set(drawn)
        bottom = screen_rows(app)[23]
        shown = {
            key: bottom[drawn[key].start : drawn[key].end].strip() for key in ("q", "p", "s", "question_mark", "a", "g")
        }
        assert shown == {
            "q": "q Quit",
            "p": "p Pause",
            "s": "s Sort",
            "question_mark": "? Help",
            "a": "a Advisor",
            "g": "g Guided run",
        }  # none cut
        assert bar.region.right == 80 and all(key.end <= 80 for key in drawn.values())
        await pilot.press("plus")  # still a key, only out of the footer
        assert "faster" in source.calls
    async with AdvisorApp(FakeSource(), job=FakeJob(LIVE), show_advisor=False).run_test(size=(80, 50)) as pilot:
        await pilot.pause()
        assert pilot.app.query_one(MachineLine).region.height == 0  # tall enough for the CPU and disk panes


async def test_the_plain_dashboard_has_no_machine_line() -> None:
    source = FakeSource()
    async with GpumonApp(source).run_test(size=(80, 24)) as pilot:
        source.push(snapshot())
        await pilot.pause()
        assert pilot.app.query_one(MachineLine).region.height == 0
