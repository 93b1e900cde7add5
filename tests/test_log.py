"""The gpumon log file: where it goes, its level from GPUMON_LOG_LEVEL, and nothing on the terminal ever."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon import log
from gpumon.jobs.client import JobClient

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpumon_logger() -> Iterator[logging.Logger]:
    """The `gpumon` logger, put back as it was (no handler, propagating) after the test."""
    logger = logging.getLogger("gpumon")
    yield logger
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def flushed_text(logger: logging.Logger, path: Path) -> str:
    for handler in logger.handlers:
        handler.flush()
    return path.read_text(encoding="utf-8")


def test_the_file_is_under_the_xdg_state_dir_or_home(tmp_path: Path) -> None:
    assert log.log_path({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "gpumon" / "gpumon.log"
    assert log.log_path({"HOME": "/home/ada"}) == Path("/home/ada/.local/state/gpumon/gpumon.log")
    assert log.log_path({"HOME": "/home/ada", "XDG_STATE_HOME": "relative"}).parent == Path(
        "/home/ada/.local/state/gpumon"
    )


def test_a_failing_listener_lands_in_the_file_with_level_and_traceback(
    tmp_path: Path, gpumon_logger: logging.Logger
) -> None:
    """A real JobClient on a socket that is not there ends and tells its listener, which raises: the stream goes on,
    and the log file holds the warning with the listener's traceback."""
    path = log.configure({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert path == tmp_path / "state" / "gpumon" / "gpumon.log"
    called = threading.Event()

    def broken_listener(what: str) -> None:
        called.set()
        raise RuntimeError(f"listener bug on {what}")

    client = JobClient(str(tmp_path / "no-job.sock"))
    client.start(broken_listener)
    assert called.wait(10)
    client.stop()
    assert client.state.ended
    text = flushed_text(gpumon_logger, path)
    assert " WARNING gpumon.jobs.client: job 0: a listener failed on 'ended'" in text
    assert "Traceback (most recent call last):" in text
    assert "RuntimeError: listener bug on ended" in text


@pytest.mark.parametrize(
    ("level", "debug_kept", "warning_kept"),
    [(None, False, True), ("debug", True, True), ("ERROR", False, False), ("10", True, True), ("loud", False, True)],
)
def test_gpumon_log_level_sets_what_is_kept(
    tmp_path: Path, gpumon_logger: logging.Logger, level: str | None, debug_kept: bool, warning_kept: bool
) -> None:
    environ = {"XDG_STATE_HOME": str(tmp_path)}
    if level is not None:
        environ[log.LEVEL_VARIABLE] = level
    path = log.configure(environ)
    assert path is not None
    logging.getLogger("gpumon.sampling.replay").debug("a debug line")
    logging.getLogger("gpumon.advisor.live").warning("a warning line")
    text = flushed_text(gpumon_logger, path)
    assert ("DEBUG gpumon.sampling.replay: a debug line" in text) == debug_kept
    assert ("WARNING gpumon.advisor.live: a warning line" in text) == warning_kept


def bad_mid_recording(tmp_path: Path) -> Path:
    """The real H100 recording with line 51 broken: a replay reads the 49 snapshots before it, then stops."""
    lines = (REPOSITORY / "assets" / "recordings" / "h100-training.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "bad-mid.jsonl"
    path.write_text("".join(lines[:50]) + "{broken\n" + "".join(lines[50:]))
    return path


def replay_screenshot(tmp_path: Path, state_home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", "replay", str(bad_mid_recording(tmp_path)), "--screenshot", "shot.svg"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_STATE_HOME": str(state_home), "PYTHONPATH": str(REPOSITORY)},
    )


def test_a_cli_warning_goes_to_the_file_not_the_terminal(tmp_path: Path) -> None:
    result = replay_screenshot(tmp_path, tmp_path / "state")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "truncated/corrupt after 49 samples" in result.stderr
    assert "Traceback" not in result.stderr
    text = (tmp_path / "state" / "gpumon" / "gpumon.log").read_text(encoding="utf-8")
    assert "WARNING gpumon.sampling.replay: replay of bad-mid.jsonl ends early:" in text
    assert "bad-mid.jsonl line 51: not valid JSON" in text


def test_an_unwritable_state_dir_is_harmless(tmp_path: Path) -> None:
    """XDG_STATE_HOME under a regular file: no log file can be made; the command still says only its own line."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = replay_screenshot(tmp_path, blocker / "state")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "truncated/corrupt after 49 samples" in result.stderr


def test_configure_without_a_file_drops_records_quietly(
    tmp_path: Path, gpumon_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert log.configure({"XDG_STATE_HOME": str(blocker / "state")}) is None
    logging.getLogger("gpumon.jobs.client").error("dropped quietly")
    assert capsys.readouterr().err == ""


def test_the_log_is_private_and_its_directories_are_made_0700(tmp_path: Path, gpumon_logger: logging.Logger) -> None:
    path = log.configure({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert path is not None
    logging.getLogger("gpumon.jobs.client").warning("a command line: python train.py --token secret")
    assert "--token secret" in flushed_text(gpumon_logger, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


@pytest.mark.parametrize(("mode", "used"), [(0o755, True), (0o775, False), (0o777, False)])
def test_an_existing_log_directory_is_used_as_it_is_or_not_at_all(
    tmp_path: Path, gpumon_logger: logging.Logger, mode: int, used: bool
) -> None:
    directory = tmp_path / "gpumon"
    directory.mkdir()
    directory.chmod(mode)
    path = log.configure({"XDG_STATE_HOME": str(tmp_path)})
    logging.getLogger("gpumon.jobs.client").error("a record")
    assert (path is not None) == used and (directory / "gpumon.log").exists() == used
    assert stat.S_IMODE(directory.stat().st_mode) == mode


def test_a_symlink_planted_at_the_log_is_not_followed(tmp_path: Path, gpumon_logger: logging.Logger) -> None:
    (tmp_path / "gpumon").mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("kept\n")
    victim.chmod(0o644)
    (tmp_path / "gpumon" / "gpumon.log").symlink_to(victim)
    assert log.configure({"XDG_STATE_HOME": str(tmp_path)}) is None
    logging.getLogger("gpumon.jobs.client").error("not for the victim")
    assert victim.read_text() == "kept\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
