"""`gpumon fleet`'s command line: a bad URL, interval, filter, sort or credential is one line and exit 2, before
any view starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.cli import main

REPO = Path(__file__).resolve().parents[2]


def exit_code(argv: list[str]) -> int | str | None:
    try:
        return main(argv)
    except SystemExit as exited:  # argparse's own errors exit from inside parse_args
        return exited.code


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["fleet", "--prometheus", "ftp://prom:9090"], "gpumon: error: bad Prometheus URL 'ftp://prom:9090'"),
        (["fleet", "--prometheus", "http://prom:99999"], "gpumon: error: bad Prometheus URL 'http://prom:99999'"),
        (["fleet", "--prometheus", "http://\x1b[2Jprom"], "gpumon: error: bad Prometheus URL 'http://\\x1b[2Jprom'"),
        (["fleet", "--prometheus", "http://prom:9090", "--interval", "0"], "gpumon fleet: error: argument --interval"),
        (["fleet"], "gpumon fleet: error: the following arguments are required: --prometheus"),
        (["fleet", "--prometheus", "http://p:9090", "--filter", "util<x"], "gpumon: error: bad filter term 'util<x'"),
        (["fleet", "--prometheus", "http://p:9090", "--filter", "host=~("], "gpumon: error: bad filter term 'host=~('"),
        (["fleet", "--prometheus", "http://p:9090", "--sort", "speed"], "gpumon: error: bad sort 'speed'"),
        (
            ["fleet", "--prometheus", "http://p:9090", "--filter", "state=bogus"],
            "gpumon: error: bad filter term 'state=bogus': no state 'bogus' (one of down, nvml_failed, off_bus,",
        ),
        (
            ["fleet", "--prometheus", "http://p:9090", "--ca-file", "ca.pem"],
            "gpumon: error: --ca-file needs an https://",
        ),
        (["fleet", "--prometheus", "http://p:9090", "--header", "X: \x1b"], "gpumon: error: --header X: its value"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1
    assert "\x1b" not in err


@pytest.mark.parametrize(
    "flag", ["--bearer-token-file", "--basic-auth-file", "--ca-file"], ids=["token", "basic-auth", "ca"]
)
def test_a_fifo_for_a_credentials_file_is_refused_not_waited_on(flag: str, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened for reading, it would wait for a writer forever
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "fleet", "--prometheus", "https://prom:9090", flag, str(fifo)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("gpumon: error: ") and result.stderr.count("\n") == 1
    assert "not a regular file" in result.stderr
