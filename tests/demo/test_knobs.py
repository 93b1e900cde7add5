"""GPUMON_KNOBS parsing and the demo CLI's handling of bad knobs (no torch needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon_demo.cli import main
from gpumon_demo.knobs import (
    KNOBS_ACK_ENV,
    KNOBS_ENV,
    KNOWN_KNOBS,
    KnobError,
    acknowledge_knobs,
    default_knobs,
    format_knobs,
    parse_knobs,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_valid_knobs_are_parsed_with_their_types() -> None:
    text = '{"num_workers": 4, "pin_memory": true, "prefetch_factor": null, "batch_size": 256, "tf32": null}'
    assert parse_knobs(text) == {
        "num_workers": 4, "pin_memory": True, "prefetch_factor": None, "batch_size": 256, "tf32": None,
    }  # fmt: skip


@pytest.mark.parametrize("text", [None, "", "   "])
def test_absent_or_empty_sets_no_knob(text: str | None) -> None:
    assert parse_knobs(text) == {}


def test_every_default_is_valid_for_its_knob() -> None:
    for name, knob in KNOWN_KNOBS.items():
        assert knob.check(knob.default) == knob.default, name
    assert set(default_knobs()) == set(KNOWN_KNOBS)


def test_unknown_knob_is_named() -> None:
    with pytest.raises(KnobError, match="unknown knob 'num_wrokers'"):
        parse_knobs('{"num_wrokers": 4}')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"num_workers": "4"}', "must be an integer"),
        ('{"num_workers": true}', "must be an integer"),
        ('{"num_workers": 2.5}', "must be an integer"),
        ('{"num_workers": -1}', "must be >= 0"),
        ('{"batch_size": 0}', "must be >= 1"),
        ('{"batch_size": null}', "must be an integer"),
        ('{"pin_memory": 1}', "must be true or false"),
        ('{"amp_bf16": "yes"}', "must be true or false"),
        ('{"amp_bf16": null}', "must be true or false"),
        ('{"tf32": 1}', "must be true, false or null"),
    ],
)
def test_bad_types_and_ranges_are_refused(text: str, expected: str) -> None:
    with pytest.raises(KnobError, match=expected):
        parse_knobs(text)


@pytest.mark.parametrize("text", ['{"num_workers": 4', "num_workers=4", "{'pin_memory': true}"])
def test_bad_json_is_refused(text: str) -> None:
    with pytest.raises(KnobError, match="not valid JSON"):
        parse_knobs(text)


@pytest.mark.parametrize("text", ["[1, 2]", "4", '"num_workers"'])
def test_json_that_is_not_an_object_is_refused(text: str) -> None:
    with pytest.raises(KnobError, match="must be a JSON object"):
        parse_knobs(text)


def test_format_knobs_round_trips_and_validates() -> None:
    values = {"num_workers": 8, "amp_bf16": True}
    assert parse_knobs(format_knobs(values)) == values
    with pytest.raises(KnobError):
        format_knobs({"nope": 1})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("{bad", "not valid JSON"), ('{"turbo": true}', "unknown knob 'turbo'"), ('{"log_every": "x"}', "must be")],
)
def test_cli_refuses_bad_knobs_with_one_line_and_exit_2(
    text: str, expected: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KNOBS_ENV, text)
    assert main(["--steps", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert expected in lines[0] and lines[0].startswith("gpumon-demo: error:")


def test_module_exits_2_on_bad_knobs_before_importing_torch() -> None:
    script = """
import json, runpy, sys
sys.argv = ["gpumon_demo"]
try:
    runpy.run_module("gpumon_demo", run_name="__main__")
except SystemExit as exit_:
    print(json.dumps([exit_.code, "torch" in sys.modules]))
"""
    env = os.environ | {KNOBS_ENV: '{"num_workers": "many"}'}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert json.loads(result.stdout) == [2, False]
    assert result.stderr.count("\n") == 1 and "knob 'num_workers' must be an integer" in result.stderr


def test_cli_refuses_nonsense_flags_for_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--num-workers", "-3"])
    assert exit_info.value.code == 2
    assert "must be >= 0" in capsys.readouterr().err


def test_the_knobs_read_from_the_environment_are_acknowledged_in_the_ack_file(tmp_path: Path) -> None:
    ack = tmp_path / "ack.json"
    acknowledge_knobs(["num_workers", "amp_bf16"], {KNOBS_ACK_ENV: str(ack)})
    assert json.loads(ack.read_text()) == ["amp_bf16", "num_workers"]
    acknowledge_knobs(["num_workers"], {})  # no ack file asked for: nothing written, nothing raised
    acknowledge_knobs(["num_workers"], {KNOBS_ACK_ENV: str(tmp_path / "missing-dir" / "ack.json")})
