"""`c` in the dashboard: a real hooked CPU job profiled for 5 steps, its summary in a modal; one line without a job."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Static
from tui_support import FakeSource

from gpumon import protocol
from gpumon.jobs.session import AttachedJob
from gpumon.tui.app import GpumonApp
from gpumon.tui.profile_screen import CAPTURE_NEEDS_A_JOB, ProfileScreen
from tests.attach.attach_helpers import HOOKED_JOB, Job


@pytest.fixture
def hooked_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Job]:
    base = tempfile.mkdtemp(prefix="gpumon-tui-profile-", dir="/tmp")
    directory = os.path.join(base, "s")
    os.mkdir(directory, 0o700)
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    job = Job(HOOKED_JOB, ["--seconds", "120"], directory)
    try:
        job.event("ready")
        yield job
    finally:
        job.kill()
        shutil.rmtree(base, ignore_errors=True)


def notes(app: GpumonApp) -> list[str]:
    return [str(notification.message) for notification in app._notifications]


async def test_c_profiles_the_followed_job_and_shows_the_summary(hooked_job: Job, tmp_path: Path) -> None:
    job = AttachedJob.for_pid(hooked_job.pid)
    assert job is not None
    app = GpumonApp(FakeSource(), job=job)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        assert any(f"profiling 5 steps of pid {hooked_job.pid}" in note for note in notes(app))
        for _ in range(300):
            if isinstance(app.screen, ProfileScreen):
                break
            await asyncio.sleep(0.1)
        assert isinstance(app.screen, ProfileScreen), notes(app)
        summary = str(app.screen.query_one("#profile-summary", Static).render())
        assert "steps captured: 5" in summary and "no CUDA kernels" in summary
        traces = tmp_path / "cache" / "gpumon" / "traces"
        assert [p.name for p in traces.iterdir()] == [Path(app.screen.lines[0].removeprefix("trace: ")).name]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProfileScreen)


async def test_c_without_a_job_says_so_in_one_line() -> None:
    app = GpumonApp(FakeSource())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("c")
        await pilot.pause()
        assert CAPTURE_NEEDS_A_JOB in notes(app)
        assert not isinstance(app.screen, ProfileScreen)
