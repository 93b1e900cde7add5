"""`gpumon diagnose`, `gpumon experiment` and `gpumon demo` (through gpumon.cli.main): one-line errors,
real headless runs on CPU, and no process left behind when the demo is interrupted."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from advisor_support import REPO

from gpumon import protocol
from gpumon.advisor.categories import CATEGORIES
from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals
from gpumon.cli import main

PLAIN = [sys.executable, str(Path(__file__).parent / "jobs" / "plain_train.py"), "--seconds", "120"]


@pytest.fixture
def sock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    directory = str(tmp_path / "sockets")
    monkeypatch.setenv(protocol.SOCKET_DIR_ENV, directory)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv(protocol.KNOBS_ENV, raising=False)
    return directory


@pytest.mark.parametrize(
    "argv, message",
    [
        (["diagnose"], "gpumon diagnose needs a command"),
        (["experiment", "--pid", "1", "--", "python", "x.py"], "either --pid or a command, not both"),
        (["experiment", "--try", "warp=9", "--", "python", "x.py"], "unknown knob 'warp'"),
        (["experiment", "--try", "num_workers", "--", "python", "x.py"], "expected KNOB=VALUE"),
        (["experiment", "--repeats", "0", "--", "python", "x.py"], "--repeats must be at least 1"),
        (["demo", "--json"], "--json and --markdown go with --guided"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpumon: error: ") and message in err[0]


def test_diagnosing_a_pid_that_does_not_exist_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--pid", "999999", "--duration", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gpumon: error: ") and "999999" in err[-1]


def test_live_experiments_on_a_pid_without_the_hook_say_what_they_need(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert main(["experiment", "--pid", str(job.pid)]) == 2
    finally:
        job.kill()
        job.wait()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"gpumon: error: pid {job.pid} has no gpumon hook: live experiments need it (`import gpumon.hook`, or "
        "`gpumon experiment -- CMD` for trial runs)"
    ]


def test_live_experiments_on_a_pid_that_does_not_exist_say_only_that(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "--pid", "999999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpumon: error: no process with pid 999999"]


def test_diagnose_runs_the_command_hooked_and_prints_the_finding(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", "--json", "--duration", "3", "--warmup", "0.5", "--", *PLAIN]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["finding"]["category"] in CATEGORIES
    assert result["signals"]["source"] == "hook" and result["signals"]["num_workers"] == 0
    assert result["signals"]["device"] == "cpu" and result["signals"]["steps"] > 0


def test_diagnose_prints_the_step_model_under_the_finding(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpumon.advisor import session

    signals = Signals.of(
        source="hook",
        step_shares={"gpu_busy": 0.2, "data": 0.0, "cpu": 0.77, "launch": 0.03},
        step_busy_from="stream",
        idle_lines=("train.py:42 (pre\x1bprocess)",),
        idle_line_shares=(0.77,),
    )
    finding = Finding(category="cpu_bound", evidence="main thread busy", confidence=0.8, severity=0.7, source="hook")

    def diagnosed(command: list[str], **_options: object) -> session.Diagnosis:
        assert command == ["python", "train.py"]
        return session.Diagnosis(finding=finding, signals=signals)

    monkeypatch.setattr(session, "diagnose_command", diagnosed)
    assert main(["diagnose", "--", "python", "train.py"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(finding.headline)
    assert out[-2:] == [
        "Step time: GPU busy 20%, torch dispatch and launch 3%, the job's own CPU code 77% "
        "(GPU busy from the training stream)",
        "GPU idle at: train.py:42 (pre\\x1bprocess) 77%",
    ]


def test_experiment_reports_hook_knobs_applied_and_script_knobs_needing_a_code_change(
    sock_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    markdown = tmp_path / "results.md"
    argv = [
        "experiment",
        "--json",
        "--markdown",
        str(markdown),
        "--window",
        "1",
        "--repeats",
        "2",
        "--warmup",
        "0.5",
        "--try",
        "num_workers=1",
        "--try",
        "amp_bf16=true",
        "--",
        *PLAIN,
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"]["status"] == "ok"
    workers, amp = report["variants"]
    assert workers["label"] == "num_workers 0 -> 1" and workers["status"] == "ok"
    assert workers["applied"] == {"num_workers": "hook"}, "plain_train.py ignores GPUMON_KNOBS: the hook applied it"
    assert amp["status"] == "not_applied" and "needs a code change" in amp["reason"] and not amp["kept"]
    text = markdown.read_text()
    assert "| step | GPU-Util | SM active | samples/s | speed-up |" in text
    assert "| num_workers 0 -> 1 |" in text and "not applied: amp_bf16: needs a code change" in text


def leftovers(marker: Path) -> list[psutil.Process]:
    """Processes started for this test (their TMPDIR is the test's own directory)."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("TMPDIR") == str(marker) and process.pid != os.getpid():
                found.append(process)
        except (psutil.Error, OSError):
            continue
    return found


def wait_gone(marker: Path, timeout: float = 30.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_interrupting_the_guided_demo_leaves_no_process_behind(sock_dir: str, tmp_path: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    gpumon = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "demo", "--guided", "--device", "cpu"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert gpumon.stderr is not None
        deadline = time.monotonic() + 120
        seen = ""
        while "warming up" not in seen and time.monotonic() < deadline and gpumon.poll() is None:
            seen += gpumon.stderr.readline()
        assert "the demo runs on the CPU" in seen and "warming up" in seen, seen
        trial = [p for p in leftovers(tmp_path) if "gpumon_demo" in " ".join(p.cmdline())]
        assert trial, "a demo trial is running"
        gpumon.send_signal(signal.SIGINT)  # Ctrl+C
        gpumon.wait(90)
        left = wait_gone(tmp_path)
        assert not left, f"left behind: {[p.cmdline() for p in left]}"
    finally:
        if gpumon.poll() is None:
            os.killpg(gpumon.pid, signal.SIGKILL)
        for process in leftovers(tmp_path):
            process.kill()


def test_ctrl_c_in_the_demo_dashboard_leaves_no_process_behind(sock_dir: str, tmp_path: Path) -> None:
    import pty

    env = dict(os.environ, TMPDIR=str(tmp_path), TERM="xterm-256color", COLUMNS="120", LINES="40")
    master, slave = pty.openpty()
    gpumon = subprocess.Popen(
        [sys.executable, "-m", "gpumon", "demo", "--device", "cpu"],
        cwd=REPO,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
            demo = [p for p in leftovers(tmp_path) if "gpumon_demo" in " ".join(p.cmdline())]
            if b"Advisor" in output and demo:
                break
        assert b"Advisor" in output, output[-500:]
        time.sleep(1.0)  # let the app settle before the key
        assert b"the demo runs on the CPU" in output
        os.write(master, b"\x03")  # Ctrl+C as a terminal sends it
        deadline = time.monotonic() + 90
        while gpumon.poll() is None and time.monotonic() < deadline:  # keep reading: a full pty blocks the app
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    time.sleep(0.1)
        gpumon.wait(5)
        left = wait_gone(tmp_path)
        assert not left, f"left behind: {[p.cmdline() for p in left]}; screen: {output[-300:]!r}"
    finally:
        if gpumon.poll() is None:
            os.killpg(gpumon.pid, signal.SIGKILL)
        for process in leftovers(tmp_path):
            process.kill()
        os.close(master)


def _job_without_the_hook() -> subprocess.Popen[bytes]:
    """The plain training job with the hook off (GPUMON_HOOK=0), waiting 20 ms per item in its Dataset."""
    return subprocess.Popen(
        [*PLAIN, "--item-sleep-ms", "20"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ, GPUMON_HOOK="0"),
    )


def test_diagnose_pid_of_a_job_without_the_hook_uses_py_spy(sock_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job_without_the_hook()
    try:
        time.sleep(3.0)  # past torch's import: py-spy then sees the training loop
        assert main(["diagnose", "--json", "--pid", str(job.pid), "--duration", "4"]) == 0
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    result = json.loads(capsys.readouterr().out)
    assert result["signals"]["source"] == "py-spy" and result["pid"] == job.pid
    assert result["signals"]["pyspy"]["data_wait"] > 0.5, "the loop sleeps in its Dataset: py-spy sees the wait"
    assert result["finding"]["category"] == "input_bound"
    assert result["finding"]["confidence"] < 0.9 and result["finding"]["source"] == "py-spy"


def test_diagnose_pid_native_runs_py_spy_with_native(sock_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--native reaches the py-spy rounds (seen on py-spy's own command line) and they sample the job."""
    job = _job_without_the_hook()
    pyspy_commands: list[list[str]] = []
    done = threading.Event()

    def watch_py_spy() -> None:
        while not done.wait(0.1):
            for child in psutil.Process().children(recursive=True):
                try:
                    command = child.cmdline()
                except psutil.Error:
                    continue
                if command and os.path.basename(command[0]) == "py-spy" and "record" in command:
                    pyspy_commands.append(command)

    watcher = threading.Thread(target=watch_py_spy, daemon=True)
    try:
        time.sleep(3.0)  # past torch's import: py-spy then sees the training loop
        watcher.start()
        assert main(["diagnose", "--json", "--native", "--pid", str(job.pid), "--duration", "4"]) == 0
    finally:
        done.set()
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    watcher.join(5)
    assert pyspy_commands and all("--native" in c and "--nonblocking" not in c for c in pyspy_commands)
    result = json.loads(capsys.readouterr().out)
    assert result["signals"]["source"] == "py-spy" and result["signals"]["pyspy_samples"] > 0
    assert result["finding"]["category"] == "input_bound"


def test_diagnose_native_without_pid_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--native", "--", "python", "train.py"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gpumon: error: gpumon diagnose: --native goes with --pid (a job without the hook, sampled with py-spy)"
    ]


def test_the_commands_register_into_gpumons_own_parser(capsys: pytest.CaptureFixture[str]) -> None:
    """gpumon.cli.build_parser registers the advisor's commands beside its own."""
    import argparse

    from gpumon import cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    args = parser.parse_args(["experiment", "--try", "num_workers=4", "--window", "2", "--", "python", "train.py"])
    assert args.tries == ["num_workers=4"] and args.window == 2.0 and args.command[-2:] == ["python", "train.py"]
    with pytest.raises(cli.CliError, match="needs a command"):
        parser.parse_args(["diagnose"]).handler(parser.parse_args(["diagnose"]))
    assert {"diagnose", "experiment", "demo", "run", "attach"} <= set(commands.choices)


def test_diagnose_profiles_a_distributed_job_on_its_own_and_says_so(
    sock_dir: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # torchrun's variables as rank 0 of 2 (the hook reads them into its hello): the diagnosis captures a few steps
    # with torch.profiler, announced on stderr, and its figures join the signals.
    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    assert main(["diagnose", "--json", "--duration", "4", "--warmup", "0.5", "--", *PLAIN]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert "profiling 10 steps" in captured.err and "distributed (2 ranks)" in captured.err
    assert result["capture"]["result"]["steps"] == 10
    assert result["signals"]["capture_steps"] == 10


def test_a_single_process_job_with_its_idle_explained_is_not_profiled(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", "--json", "--duration", "3", "--warmup", "0.5", "--", *PLAIN]) == 0
    captured = capsys.readouterr()
    assert "profiling" not in captured.err and "capture" not in json.loads(captured.out)
