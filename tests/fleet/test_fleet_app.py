"""The fleet view under Textual's Pilot: both hosts and the jobs shown; a lost Prometheus is one line, still running."""

from __future__ import annotations

import time

from fleet_helpers import closed_port_url, recorded_prometheus, vector
from rich.text import Text
from textual.widgets import OptionList, Static

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
