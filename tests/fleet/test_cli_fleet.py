"""`gpumon fleet`'s command line: a bad URL, interval, filter, sort or credential is one line and exit 2, before
any view starts."""

from __future__ import annotations

import pytest

from gpumon.cli import main


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
