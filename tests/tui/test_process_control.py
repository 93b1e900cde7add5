"""Process control against a real process tree: a parent with two sleeping children in a session of its own, and a
sibling that must survive. Driven with Pilot: highlight, I/T/K, confirm (or not); read-only and replays refuse."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest
from textual.pilot import Pilot
from tui_support import FakeSource, process, snapshot

from gpumon.config import Settings
from gpumon.jobs.process_signals import job_targets, process_targets, send_signal, target
from gpumon.tui.app import GpumonApp
from gpumon.tui.process_actions import READ_ONLY, REPLAY, ConfirmSignal
from gpumon.tui.process_table import ProcessTable
from gpumon.tui.view_options import ViewOptions

PARENT = """
import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[1]]) for _ in range(2)]
print(" ".join(str(child.pid) for child in children), flush=True)
time.sleep(300)
"""
DEATH_WAIT_S = 10.0


@dataclass
class Tree:
    parent: subprocess.Popen[str]
    children: list[int]
    sibling: subprocess.Popen[str]
    marker: str

    @property
    def pids(self) -> list[int]:
        return [self.parent.pid, *self.children]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], popen: subprocess.Popen[str] | None = None) -> bool:
    deadline = time.monotonic() + DEATH_WAIT_S
    while time.monotonic() < deadline:
        if popen is not None:
            popen.poll()
        if all(_gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def tree() -> Iterator[Tree]:
    marker = f"gpumon-k-test-{uuid.uuid4().hex[:8]}"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, marker], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    sibling = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", marker + "-sibling"], start_new_session=True, text=True
    )
    try:
        assert parent.stdout is not None
        children = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(children) == 2
        yield Tree(parent, children, sibling, marker)
    finally:
        for popen in (parent, sibling):
            try:
                os.killpg(popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            popen.wait(timeout=10)


def _snapshot(tree: Tree) -> object:
    """A snapshot whose one GPU process is the tree's parent, its children beneath it."""
    children = tuple(process(pid, command=f"python -c sleep {tree.marker}", gpu_memory=None) for pid in tree.children)
    return snapshot(
        processes=(
            process(tree.parent.pid, command=f"python -c parent {tree.marker}", gpu_indices=(0,), children=children),
        )
    )


async def _start(app: GpumonApp, source: FakeSource, tree: Tree, pilot: Pilot[None]) -> ProcessTable:
    source.push(_snapshot(tree))  # type: ignore[arg-type]
    await pilot.pause()
    table = app.query_one(ProcessTable)
    assert table.pids == tree.pids
    return table


def _messages(app: GpumonApp) -> list[str]:
    return [str(notification.message) for notification in app._notifications]


async def test_kill_the_whole_job_after_confirming_and_nothing_else(tree: Tree) -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(120, 30)) as pilot:
        table = await _start(app, source, tree, pilot)
        assert table.cursor_pid == tree.parent.pid
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignal)
        assert sorted(target.pid for target in app.screen.job) == sorted(tree.pids)
        await pilot.press("j")
        await pilot.pause()
        assert _wait_gone(tree.pids, tree.parent)
        assert tree.parent.returncode == -signal.SIGKILL
        assert any("SIGKILL sent to 3 processes" in message for message in _messages(app))
    assert tree.sibling.poll() is None


async def test_terminate_only_the_highlighted_child(tree: Tree) -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(120, 30)) as pilot:
        table = await _start(app, source, tree, pilot)
        await pilot.press("down")
        chosen = table.cursor_pid
        assert chosen == tree.children[0]
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignal)
        await pilot.press("p")
        await pilot.pause()
        assert _wait_gone([chosen])
        assert not _gone(tree.children[1]) and tree.parent.poll() is None and tree.sibling.poll() is None
        assert any("SIGTERM sent to 1 process" in message for message in _messages(app))


async def test_cancelling_sends_nothing(tree: Tree) -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(120, 30)) as pilot:
        await _start(app, source, tree, pilot)
        for cancel in ("n", "escape"):
            await pilot.press("K")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmSignal)
            await pilot.press(cancel)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmSignal)
        await pilot.press("K", "enter")  # the focused button is Cancel
        await pilot.pause()
        time.sleep(0.3)
        assert not any(_gone(pid) for pid in tree.pids) and tree.sibling.poll() is None
        assert _messages(app).count("SIGKILL not sent") == 3


@pytest.mark.parametrize(
    ("options", "live", "refusal"),
    [
        (ViewOptions(settings=Settings(read_only=True)), True, READ_ONLY),
        (ViewOptions(), False, REPLAY),
    ],
)
async def test_read_only_and_replays_refuse_with_a_message(
    tree: Tree, options: ViewOptions, live: bool, refusal: str
) -> None:
    source = FakeSource(live=live)
    app = GpumonApp(source, options=options)
    async with app.run_test(size=(120, 30)) as pilot:
        await _start(app, source, tree, pilot)
        for key in ("I", "T", "K"):
            await pilot.press(key)
            await pilot.pause()
            assert not isinstance(app.screen, ConfirmSignal)
        assert _messages(app) == [refusal] * 3
    time.sleep(0.3)
    assert not any(_gone(pid) for pid in tree.pids)


async def test_every_process_view_filter_and_kill_by_the_command_line(tree: Tree) -> None:
    """v lists every process as trees (the tree here is no GPU process), / finds it, K then j kills it."""
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(120, 30)) as pilot:
        source.push(snapshot())
        await pilot.pause()
        table = app.query_one(ProcessTable)
        await pilot.press("v", "slash", *tree.marker)
        deadline = time.monotonic() + DEATH_WAIT_S
        while tree.parent.pid not in table.pids and time.monotonic() < deadline:
            await pilot.pause(0.05)
        assert set(tree.pids) | {tree.sibling.pid} <= set(table.pids)
        await pilot.press("enter")  # keep the filter, back to the table
        table.move_cursor(row=table.pids.index(tree.parent.pid))
        await pilot.press("K")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmSignal)
        await pilot.press("j")
        await pilot.pause()
        assert _wait_gone(tree.pids, tree.parent)
    assert tree.sibling.poll() is None


def test_a_reused_pid_is_not_signalled(tree: Tree) -> None:
    """A target is pinned by its start time: the same pid with another start time is left alone."""
    [target] = process_targets(tree.children[0])
    moved = type(target)(target.pid, target.started - 100.0, target.command, target.user)
    [result] = send_signal([moved], signal.SIGKILL)
    assert not result.sent and "another process" in (result.error or "")
    assert not _gone(tree.children[0])


def test_gpumon_never_signals_itself_or_its_parents() -> None:
    assert process_targets(os.getpid()) == []
    assert process_targets(os.getppid()) == []
    assert os.getpid() not in {target.pid for target in job_targets(os.getppid())}


def test_the_job_of_a_rank_includes_the_other_ranks(tree: Tree) -> None:
    """A hooked job's ranks (as discovery groups them) are one job: signalling one rank's job reaches the others
    that /proc shows started by the same parent; a listed pid with another parent is left out."""
    rank, other_rank = tree.children
    pids = {target.pid for target in job_targets(rank, [[rank, other_rank, tree.sibling.pid]])}
    assert pids == {rank, other_rank}


@pytest.mark.skipif(os.geteuid() == 0, reason="root may signal every process")
def test_another_users_process_is_refused_in_one_line() -> None:
    others = [process for process in psutil.process_iter(["uids"]) if process.info["uids"].real != os.getuid()]
    theirs = next((found for process in others if (found := target(process.pid)) is not None), None)
    if theirs is None:
        pytest.skip("no other user's process here")
    assert not theirs.ours
    [result] = send_signal([theirs], signal.SIGCONT)
    assert result.error is not None and "\n" not in result.error
