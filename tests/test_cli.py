"""Tests of the command line: help, snapshot JSON, record, and one-line errors with exit code 2."""

from __future__ import annotations

import itertools
import json
import stat
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gpumon.sampling.recording import read_recording
from gpumon.sampling.snapshot import Snapshot

REPOSITORY = Path(__file__).resolve().parents[1]


def gpumon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpumon", *args], capture_output=True, text=True, timeout=timeout, cwd=REPOSITORY
    )


@pytest.mark.parametrize("command", [[], ["snapshot"], ["record"], ["replay"]])
def test_every_command_has_help(command):
    result = gpumon(*command, "--help")
    assert result.returncode == 0
    assert "usage: gpumon" in result.stdout


def test_snapshot_json_is_one_complete_sample():
    result = gpumon("snapshot", "--json", "--window", "0.2")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    snapshot = Snapshot.from_dict(data)
    assert snapshot.cpu.memory_total > 0
    assert len(snapshot.cpu.per_core) >= 1
    assert set(data) >= {"timestamp", "gpus", "gpu_error", "cpu", "disks", "processes", "hostname"}
    assert snapshot.gpus or snapshot.gpu_error, "without GPUs the snapshot must say why"


def test_record_writes_a_readable_recording(tmp_path):
    path = tmp_path / "run.jsonl"
    result = gpumon("record", str(path), "--duration", "1.2", "--interval", "0.2")
    assert result.returncode == 0, result.stderr
    snapshots = read_recording(path)
    assert len(snapshots) >= 3
    assert all(later.timestamp > earlier.timestamp for earlier, later in itertools.pairwise(snapshots))


def test_record_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("precious\n")
    result = gpumon("record", str(path), "--duration", "0.2")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "exists" in result.stderr
    assert path.read_text() == "precious\n"


def test_a_recording_is_private(tmp_path):
    path = tmp_path / "run.jsonl"
    result = gpumon("record", str(path), "--duration", "0.2")
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_record_force_replaces_the_file_and_never_writes_through_another_name_of_it(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text("precious\n")
    path.chmod(0o644)
    other_name = tmp_path / "hard-link"
    other_name.hardlink_to(path)
    result = gpumon("record", str(path), "--duration", "0.2", "--force")
    assert result.returncode == 0, result.stderr
    assert json.loads(path.read_text().splitlines()[0])["type"] == "gpumon-recording"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert other_name.read_text() == "precious\n" and stat.S_IMODE(other_name.stat().st_mode) == 0o644


@pytest.mark.parametrize(
    ("target_exists", "args", "message"),
    [
        (False, [], "{path} exists; pass --force to overwrite it"),
        (True, ["--force"], "cannot write {path}: it is a symlink, which gpumon does not follow"),
    ],
)
def test_a_symlink_planted_at_the_recording_path_is_not_followed(tmp_path, target_exists, args, message):
    victim = tmp_path / "victim"
    if target_exists:
        victim.write_text("kept\n")
    path = tmp_path / "run.jsonl"
    path.symlink_to(victim)
    result = gpumon("record", str(path), "--duration", "0.2", *args)
    assert result.returncode == 2
    assert result.stderr == f"gpumon: error: {message.format(path=path)}\n"
    assert victim.exists() == target_exists and (not target_exists or victim.read_text() == "kept\n")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"kind": "foreign"}\n', "line 1: not a gpumon recording"),
        ("", "line 1: empty file"),
    ],
)
def test_replay_of_a_bad_file_is_one_line_and_exit_2(tmp_path, content, expected):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    result = gpumon("replay", str(path))
    assert result.returncode == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_replay_of_a_truncated_recording_names_the_line(tmp_path):
    source = (REPOSITORY / "assets" / "recordings" / "h100-training.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "cut.jsonl"
    path.write_text("".join(source[:5]) + source[5][:100])
    result = gpumon("replay", str(path))
    assert result.returncode == 2
    assert "line 6: truncated" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_replay_screenshot_draws_the_last_snapshot_with_its_history(tmp_path):
    """`gpumon replay --screenshot` on a real H200 recording: an SVG of the dashboard (no terminal), its graphs drawn
    from the recording's history."""
    out = tmp_path / "shot.svg"
    result = gpumon(
        "replay", "assets/recordings/h200-training-health.jsonl", "--screenshot", str(out), "--size", "120x40"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gpumon: wrote {out} (120x40, 50 snapshots)"
    root = ElementTree.fromstring(out.read_text(encoding="utf-8"))
    text = "".join(root.itertext()).replace("\xa0", " ")
    assert "GPU0 H200" in text
    braille = [char for char in text if "\u2801" <= char <= "\u28ff"]
    assert len(braille) >= 100, "the graphs are drawn from the history"


def test_replay_screenshot_at_a_moment_of_a_two_gpu_recording(tmp_path):
    """`--at 55` on the 2 x H100 recording: the screen 55 s in, while its two DDP ranks run (one per GPU, NVLink busy),
    not its idle end."""
    out = tmp_path / "shot.svg"
    result = gpumon("replay", "assets/recordings/h100x2-tests.jsonl", "--at", "55", "--screenshot", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gpumon: wrote {out} (160x50, 55 snapshots)"
    root = ElementTree.fromstring(out.read_text(encoding="utf-8"))
    text = "".join(root.itertext()).replace("\xa0", " ")
    assert "GPU0 H100 80GB HBM3" in text
    assert "GPU1 H100 80GB HBM3" in text
    assert "Processes · 2 on GPU" in text
    assert "NVLink ↓125GB/s" in text  # 116 GiB/s, in the decimal units the README and the exporter use


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--screenshot", "shot.svg", "--at", "500"), "--at 500 is past the recording's end (24.5 s after its first"),
        (("--screenshot", "shot.svg", "--at", "-3"), "must be zero or a positive number"),
        (("--screenshot", "/nonexistent-dir/shot.svg"), "gpumon: error: cannot write /nonexistent-dir/shot.svg"),
        (("--screenshot", "shot.svg", "--size", "10x5"), "is outside 40x12"),
        (("--screenshot", "shot.svg", "--size", "wide"), "is not COLUMNSxROWS"),
    ],
)
def test_replay_screenshot_refuses_bad_paths_and_sizes_in_one_line(args, expected):
    result = gpumon("replay", "assets/recordings/h200-training-health.jsonl", *args)
    assert result.returncode == 2
    assert expected in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (REPOSITORY / "shot.svg").exists()


@pytest.mark.parametrize("interval", ["0", "-1", "abc", "11", "nan"])
def test_bad_interval_is_refused(interval):
    result = gpumon("--interval", interval)
    assert result.returncode == 2
    assert "--interval" in result.stderr


def test_diagnose_help_names_every_finding_category() -> None:
    """The help listed nine of the categories; comm_bound and straggler were missing."""
    from gpumon.advisor.categories import CATEGORIES

    text = " ".join(gpumon("diagnose", "--help").stdout.split())
    assert all(category in text for category in CATEGORIES), [c for c in CATEGORIES if c not in text]


@pytest.mark.parametrize("command", ["diagnose", "experiment", "demo"])
def test_a_warmup_of_zero_is_accepted_and_a_negative_one_refused(command: str) -> None:
    from gpumon.cli import build_parser

    extra = ["--", "true"] if command != "demo" else []
    assert build_parser().parse_args([command, "--warmup", "0", *extra]).warmup == 0.0
    refused = gpumon(command, "--warmup", "-1", *extra)
    assert refused.returncode == 2 and "zero or a positive number" in refused.stderr
