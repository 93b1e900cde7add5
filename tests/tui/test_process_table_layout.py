"""The process table at 80x24 and its trees: user and script shown narrow, commands from
what matters, deep trees drawn whole, a header click sorts, `a` beside a followed job, counted nouns."""

from __future__ import annotations

from test_job_app import LIVE, FakeJob
from textual.widgets import Label
from tui_support import FakeSource, process, snapshot, widget_text

from gpumon.jobs.job_info import JobGroup, JobInfo
from gpumon.tui.app import GpumonApp
from gpumon.tui.command_text import command_shown, what_matters
from gpumon.tui.extension import ADVISOR_NEEDS_A_JOB
from gpumon.tui.format import plural, state_letter
from gpumon.tui.job_picker import JobPicker
from gpumon.tui.process_table import ProcessTable, row_cells, tree_order

LONG_COMMAND = "/opt/torch/.venv/bin/python3 -u /home/alice/projects/llm/train_llama.py --lr 3e-4 --batch 64"


def test_a_long_command_is_shown_from_the_script_or_program() -> None:
    assert what_matters(LONG_COMMAND) == "train_llama.py --lr 3e-4 --batch 64"
    assert what_matters("python3 -X dev -W ignore jobs/eval.py --fast") == "eval.py --fast"
    assert (
        what_matters("/usr/bin/python3.11 -m torch.distributed.run x.py") == "python3.11 -m torch.distributed.run x.py"
    )
    assert what_matters("/usr/local/bin/vllm serve meta-llama/Llama-3-8B") == "vllm serve meta-llama/Llama-3-8B"
    assert what_matters("python3") == "python3" and what_matters("") == ""
    assert command_shown("python3 a.py", 20) == "python3 a.py"  # it fits: the whole line
    assert command_shown(LONG_COMMAND, 40) == "train_llama.py --lr 3e-4 --batch 64"


async def test_at_80x24_the_user_and_the_script_are_shown() -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    processes = (
        process(4_194_301, user="alice", command=LONG_COMMAND, gpu_indices=(0,), state="disk-sleep"),
        process(2_000, user="bob", command="python3 eval.py", gpu_indices=(0,)),
    )
    async with app.run_test(size=(80, 24)) as pilot:
        source.push(snapshot(processes=processes))
        await pilot.pause()
        lines = widget_text(app.query_one(ProcessTable)).splitlines()
        header = next(line for line in lines if "PID" in line)
        assert "USER" in header and "COMMAND" in header
        alice = next(line for line in lines if "4194301" in line)
        assert "alice" in alice and "train_llama.py" in alice and "/opt" not in alice
        assert " D " in alice  # the state as ps's letter
        assert "bob" in next(line for line in lines if "2000" in line)
        await pilot.resize_terminal(200, 40)
        await pilot.pause()
        wide = widget_text(app.query_one(ProcessTable))
        assert "STATE" in wide and "R/s" in wide and "disk" in wide
        assert "/opt/torch/.venv/bin/python3 -u /home/alice/projects/llm/train_llama.py --lr 3e-4" in wide


DEEP = process(
    1,
    command="systemd",
    children=(
        process(
            1200,
            command="sshd",
            children=(
                process(
                    34567,
                    command="bash",
                    children=(
                        process(
                            45678,
                            command="python train.py",
                            children=(process(45690, command="worker"), process(45691, command="worker")),
                        ),
                        process(45700, command="tmux"),
                    ),
                ),
                process(1300, command="sshd2"),
            ),
        ),
        process(2000, command="cron"),
    ),
)


def test_a_deep_tree_is_drawn_whole_in_the_command_column() -> None:
    rows = [(row_cells(p, branch, command_width=40)) for p, branch in tree_order((DEEP,), "pid", False)]
    drawn = [(cells["pid"].plain, cells["command"].plain) for cells in rows]
    assert drawn == [
        ("1", "systemd"),
        ("1200", "├─ sshd"),
        ("1300", "│  ├─ sshd2"),
        ("34567", "│  └─ bash"),
        ("45678", "│     ├─ python train.py"),
        ("45690", "│     │  ├─ worker"),
        ("45691", "│     │  └─ worker"),
        ("45700", "│     └─ tmux"),
        ("2000", "└─ cron"),
    ]
    # Narrow, the indentation keeps at most half the column (its right end) and the command the rest.
    narrow = row_cells(process(7, command="worker"), "│     │  └─ ", command_width=12)
    assert narrow["command"].plain == "  └─ worker"[1:] or narrow["command"].plain == "│  └─ worker"


async def test_a_deep_tree_on_screen_lines_up() -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    async with app.run_test(size=(120, 70)) as pilot:
        source.push(snapshot(processes=(DEEP,)))
        await pilot.pause()
        app.query_one(ProcessTable).sort_by("pid")
        await pilot.pause()
        text = widget_text(app.query_one(ProcessTable))
    for pid, drawn in ((45690, "│     │  ├─ worker"), (45700, "│     └─ tmux"), (2000, "└─ cron")):
        line = next(line for line in text.splitlines() if line.lstrip().startswith(str(pid)))
        assert line.endswith(drawn)


async def test_a_click_on_a_header_sorts_by_it_and_again_reverses() -> None:
    source = FakeSource(live=True)
    app = GpumonApp(source)
    processes = (process(10, cpu_percent=5.0, gpu_indices=(0,)), process(20, cpu_percent=90.0, gpu_indices=(0,)))
    async with app.run_test(size=(120, 40)) as pilot:
        source.push(snapshot(processes=processes))
        await pilot.pause()
        table = app.query_one(ProcessTable)
        header_y, header = next(
            (y, line) for y, line in enumerate(widget_text(table).splitlines()) if "CPU%" in line and "PID" in line
        )
        assert await pilot.click(ProcessTable, offset=(header.index("CPU%"), header_y))
        await pilot.pause()
        assert (table.sort_column, table.sort_descending, table.pids) == ("cpu_percent", True, [20, 10])
        assert await pilot.click(ProcessTable, offset=(header.index("CPU%"), header_y))
        await pilot.pause()
        assert (table.sort_column, table.sort_descending, table.pids) == ("cpu_percent", False, [10, 20])
        assert await pilot.click(ProcessTable, offset=(header.index("PID"), header_y))
        await pilot.pause()
        assert (table.sort_column, table.sort_descending, table.pids) == ("pid", False, [10, 20])
        assert await pilot.click(ProcessTable, offset=(header.index("USER"), header_y))
        await pilot.pause()
        assert table.sort_column == "pid"
        assert any("USER is not a sort column" in str(note.message) for note in app._notifications)


async def test_a_beside_a_followed_job_names_where_the_advisor_is() -> None:
    app = GpumonApp(FakeSource(), job=FakeJob(LIVE))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        messages = [str(note.message) for note in app._notifications]
    assert ADVISOR_NEEDS_A_JOB not in messages
    assert f"gpumon attach {LIVE.pid}" in messages[-1]


def test_counted_nouns_agree() -> None:
    assert [plural(count, "job") for count in (0, 1, 2)] == ["0 jobs", "1 job", "2 jobs"]
    assert plural(1, "process", "processes") == "1 process" and plural(3, "process", "processes") == "3 processes"
    assert [state_letter(state) for state in ("running", "disk-sleep", "zombie", None, "new")] == list("RDZ??")


async def test_the_picker_counts_one_job_as_one() -> None:
    info = JobInfo(pid=42, socket_path="/tmp/x.sock", hello={"argv": ["python", "train.py"], "cwd": "/tmp"})
    app = GpumonApp(FakeSource(), jobs=[JobGroup(key=None, jobs=(info,))])
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, JobPicker)
        label = str(app.screen.query_one(Label).render())
    assert "1 hooked training job ·" in label
