"""The fleet view under Textual's Pilot: both hosts and the jobs shown; a lost Prometheus is one line, still running."""

from __future__ import annotations

import time

import pytest
from fleet_helpers import closed_port_url, many_hosts, recorded_prometheus, vector
from rich.text import Text
from textual.widgets import Input, OptionList, Static

from gpumon.fleet import FleetSnapshot, GpuRow, JobRow, PromClient, RankRow
from gpumon.tui.fleet_app import FleetApp, ProcessScreen

GIB = 1 << 30
FLEET = FleetSnapshot(
    taken=1795436099.0,
    gpus=(
        GpuRow("sim-node-a", "0", 44.0, 31.0, 20 * GIB, 80 * GIB, (10.0, None, 44.0), (31.0,), (25.0,)),
        GpuRow("sim-node-b", "0", 25.0, 12.0, 8 * GIB, 80 * GIB),
    ),
    jobs=(
        JobRow(
            run_id="run-7",
            command="python3 train.py",
            ranks=(RankRow("sim-node-a", "100", 0, 100.0, 5.0), RankRow("sim-node-b", "100", 1, 200.0, 5.0)),
            straggler=1,
            finding="input_bound",
            confidence=0.8,
        ),
    ),
    hosts=("sim-node-a", "sim-node-b"),
)
LOST = FleetSnapshot(taken=1795436104.0, error="Prometheus at http://127.0.0.1:9 unreachable: Connection refused")


def shown(app: FleetApp, selector: str) -> str:
    content = app.screen.query_one(selector, Static).content
    return content.plain if isinstance(content, Text) else str(content)


def gpu_rows(app: FleetApp) -> str:
    table = app.query_one("#gpus", OptionList)
    lines = [shown(app, "#gpu-header")]
    lines += [str(table.get_option_at_index(i).prompt) for i in range(table.option_count)]
    return "\n".join(lines)


async def test_both_hosts_and_the_job_shown() -> None:
    app = FleetApp()
    async with app.run_test(size=(120, 30)) as pilot:
        app.show(FLEET)
        await pilot.pause()
        gpus, jobs = gpu_rows(app), shown(app, "#jobs")
        assert "sim-node-a" in gpus and "sim-node-b" in gpus
        assert "44%" in gpus and "25%" in gpus and "20.0 GiB / 80.0 GiB" in gpus
        assert "run-7" in jobs and "2 ranks on 2 hosts" in jobs and "finding: input_bound (80% confidence)" in jobs
        straggler_line = next(line for line in jobs.splitlines() if "straggler" in line)
        assert "rank   1" in straggler_line and "sim-node-b" in straggler_line
        assert " · 2 hosts, 2 GPUs, 1 job · sort host" in shown(app, "#status")


async def test_lost_prometheus_is_one_line_over_the_last_rows() -> None:
    app = FleetApp()
    async with app.run_test(size=(120, 30)) as pilot:
        app.show(FLEET)
        app.show(LOST)
        await pilot.pause()
        assert shown(app, "#status") == LOST.error
        assert app.query_one("#status", Static).has_class("error")
        assert "sim-node-b" in gpu_rows(app)  # the last good rows stay
        app.show(FLEET)
        await pilot.pause()
        assert not app.query_one("#status", Static).has_class("error")


async def test_polls_a_lost_prometheus_and_keeps_running() -> None:
    url = closed_port_url()
    app = FleetApp(PromClient(url, timeout=2.0), interval=0.1)
    async with app.run_test(size=(120, 30)) as pilot:
        deadline = time.monotonic() + 20
        while app.latest is None and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert app.latest is not None, "a snapshot from the poller within 20 s"
        assert shown(app, "#status") == f"Prometheus at {url} unreachable: Connection refused"
        assert gpu_rows(app) == "no GPU rows yet"
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_enter_on_a_host_shows_its_processes() -> None:
    host = {"host": "sim-node-b", "gpu": "0", "pid": "4242", "command": "python3 train.py"}
    answers = {
        'gpumon_process_gpu_memory_bytes{host="sim-node-b"}': vector((host, 3 * GIB)),
        'gpumon_process_sm_ratio{host="sim-node-b"}': vector((host, 0.5)),
        'gpumon_process_cpu_ratio{host="sim-node-b"}': vector((host, 1.25)),
        'gpumon_process_resident_memory_bytes{host="sim-node-b"}': vector((host, 2 * GIB)),
    }
    with recorded_prometheus(answers) as url:
        app = FleetApp(PromClient(url, timeout=2.0), interval=3600)
        async with app.run_test(size=(120, 30)) as pilot:
            app.show(FLEET)
            await pilot.pause()
            app.query_one("#gpus", OptionList).focus()
            await pilot.press("down", "enter")
            screen = app.screen
            assert isinstance(screen, ProcessScreen) and screen.host == "sim-node-b"
            deadline = time.monotonic() + 20
            while screen.answer is None and time.monotonic() < deadline:
                await pilot.pause(0.05)
            table = shown(app, "#processes")
            assert "4242" in table and "3.0 GiB" in table and "50%" in table and "1.25" in table
            assert "python3 train.py" in table
            await pilot.press("escape")
            assert not isinstance(app.screen, ProcessScreen)


async def test_a_host_without_process_series_is_one_line() -> None:
    with recorded_prometheus({}) as url:
        app = FleetApp(PromClient(url, timeout=2.0), interval=3600)
        async with app.run_test(size=(120, 30)) as pilot:
            app.show(FLEET)
            await pilot.pause()
            app.query_one("#gpus", OptionList).focus()
            await pilot.press("enter")
            screen = app.screen
            assert isinstance(screen, ProcessScreen)
            deadline = time.monotonic() + 20
            while screen.answer is None and time.monotonic() < deadline:
                await pilot.pause(0.05)
            assert shown(app, "#processes").splitlines()[-1] == (
                "Prometheus has no gpumon_process_* series for host sim-node-a"
            )


def option_lines(app: FleetApp) -> list[str]:
    table = app.query_one("#gpus", OptionList)
    return [str(table.get_option_at_index(i).prompt) for i in range(table.option_count)]


async def assert_no_row_wraps(app: FleetApp, width: int) -> None:
    table = app.query_one("#gpus", OptionList)
    assert table.virtual_size.height == table.option_count  # one line per row: none wrapped
    assert all(len(line) <= width - 1 for line in option_lines(app))
    assert len(shown(app, "#gpu-header")) <= width - 1


@pytest.mark.parametrize("width", [80, 100, 160, 220])
async def test_400_gpu_rows_never_wrap_and_keep_host_state_and_health(width: int) -> None:
    app = FleetApp()
    async with app.run_test(size=(width, 24)) as pilot:
        app.show(many_hosts())
        await pilot.pause()
        await assert_no_row_wraps(app, width)
        lines = option_lines(app)
        assert len(lines) == 48 * 8 + 2  # the DOWN and NVML FAILED hosts are one row each
        down = next(line for line in lines if "DOWN" in line)
        assert down.startswith("gpu-node-003") and "scrape failing" in down
        failed = next(line for line in lines if "NVML FAILED" in line)
        assert "NVML failed (Driver Not Loaded)" in failed and "\x1b" not in failed
        xid = next(line for line in lines if "ALERT" in line)
        assert "XID 79" in xid and "%" in xid  # utilization stays, even at 80 columns
        status = shown(app, "#status")
        assert "50 hosts: 1 DOWN, 1 NVML FAILED" in status


async def test_narrow_terminal_drops_graphs_before_health() -> None:
    app = FleetApp()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(many_hosts())
        await pilot.pause()
        header = shown(app, "#gpu-header")
        assert header.split()[:4] == ["HOST", "GPU", "STATE", "UTIL"] and header.rstrip().endswith("HEALTH")
        assert "MEMORY" not in header  # dropped at 80 columns; the health words are not
    app = FleetApp()
    async with app.run_test(size=(200, 30)) as pilot:
        app.show(many_hosts())
        await pilot.pause()
        assert "MEMORY" in shown(app, "#gpu-header")


async def test_filter_input_and_sort_keys() -> None:
    app = FleetApp()
    async with app.run_test(size=(120, 30)) as pilot:
        app.show(many_hosts())
        await pilot.pause()
        await pilot.press("slash")
        for key in "state!=ok":
            await pilot.press(key)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.focused, OptionList)
        lines = option_lines(app)
        assert [line.split()[0][:12] for line in lines] == [
            "gpu-node-003",
            "gpu-node-005",
            "gpu-node-007",
            "gpu-node-009",
            "gpu-node-011",
        ]
        assert "5 of 386 rows shown" in shown(app, "#status")
        await pilot.press("s")  # host -> state: the worst first
        await pilot.pause()
        assert [line.split()[2] for line in option_lines(app)] == ["DOWN", "NVML", "OFF", "ALERT", "WARN"]
        assert app.sort == "state"
        await pilot.press("S")
        await pilot.pause()
        assert app.sort == "-state" and option_lines(app)[0].split()[2] == "WARN"


async def test_a_bad_filter_says_why_and_keeps_the_last_good_one() -> None:
    app = FleetApp(filter_text="rack=r1")
    async with app.run_test(size=(120, 30)) as pilot:
        app.show(many_hosts())
        await pilot.pause()
        count = len(option_lines(app))
        assert 0 < count < 386
        typed = app.query_one("#filter", Input)
        typed.value = "rack=r1 util<x"
        await pilot.pause()
        assert shown(app, "#status") == "bad filter term 'util<x': 'x' is not a number"
        assert typed.has_class("invalid") and len(option_lines(app)) == count
        typed.value = "rack=r1 util<20"
        await pilot.pause()
        assert "rows shown" in shown(app, "#status")
        lines = option_lines(app)
        assert 0 < len(lines) < count and all(float(line.split("%")[0].split()[-1]) < 20 for line in lines)
