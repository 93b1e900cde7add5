"""benchmarks/nvlink_allreduce_check.py's own bookkeeping on made-up ticks and rank counts: the truth from the ranks'
counts, the checks that must fail on the issue 38 recording's symptoms (one rank reading 131 GB/s while the other reads
37.5, a figure standing for 10 s, a rate left after the traffic ended), and the progress files read while written. The
figures themselves come from a run on two GPUs (tests/gpu/test_nvlink_allreduce_gpu.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.nvlink_allreduce_check import Rank, Tick, analyse, place_ranks, read_ranks, report, ring_bytes

SIZE = 256 * 2**20
RATE = 140e9
"""Bytes/s each way the ranks move."""
ALL_REDUCE_S = SIZE / RATE
LOAD_S = 10.0


def ranks() -> list[Rank]:
    """Two ranks on GPUs 0 and 1 that all-reduce steadily for LOAD_S seconds from t=0, counting every 50 ms."""
    made = []
    for number in (0, 1):
        rank = Rank(rank=number, pid=0, uuid="", name="", local_rank=number, bytes_each_way=ring_bytes(SIZE, 2))
        steps = round(LOAD_S / 0.05)
        rank.records = [(step * 0.05, round(step * 0.05 / ALL_REDUCE_S)) for step in range(steps + 1)]
        rank.ended, rank.gpu = True, number
        made.append(rank)
    return made


Reading = Callable[[int, float, float], tuple[float | None, float | None]]


def ticks(interval: float, reading: Reading | None = None, idle: float = 3.0) -> list[Tick]:
    """A tick every `interval` from 1 s before the load to `idle` s after it, each GPU reading `reading(gpu, a, b)`
    (default: the truth, give or take 0.6%) as (rx, tx)."""
    made = []
    start, end = -1.0, LOAD_S + idle
    count = round((end - start) / interval)
    for index in range(count + 1):
        b = start + index * interval
        a = b - interval
        readings = {}
        for gpu in (0, 1):
            if reading is not None:
                readings[gpu] = reading(gpu, a, b)
            else:
                busy = max(0.0, min(b, LOAD_S) - max(a, 0.0))
                noise = 1 + 0.002 * (index % 7 - 3)  # two readings of real traffic are never equal to the last bit
                readings[gpu] = (RATE * busy / interval * noise,) * 2
        made.append(Tick(b, readings))
    return made


def test_the_ring_sends_and_receives_two_n_minus_one_over_n_of_the_tensor() -> None:
    assert ring_bytes(SIZE, 2) == SIZE
    assert ring_bytes(SIZE, 8) == pytest.approx(1.75 * SIZE)


@pytest.mark.parametrize("interval", [0.25, 1.0])
def test_readings_that_follow_the_traffic_pass_every_check(interval: float) -> None:
    result = analyse(ticks(interval), ranks())
    assert all(result["checks"].values()), result["checks"]
    summary = result["summary"]
    assert summary["gpus"]["0"]["truth_median_gb_s"] == pytest.approx(140.0, rel=0.01)
    assert summary["rank0_to_rank1"]["bytes"] == pytest.approx(1.0)
    assert summary["stale_repeats"] == 0 and summary["longest_same_reading_ticks"] == 1
    assert summary["idle"]["first_zero_tick_ends_after_end_s"] <= interval + 1e-9
    phases = [row["phase"] for row in result["rows"]]
    assert phases.count("load") >= LOAD_S / interval - 2 and "after" in phases and "before" in phases
    log = io.StringIO()
    report(result, ranks(), log, "header")
    lines = log.getvalue().splitlines()
    assert lines[0] == "header" and lines[-1] == "all checks passed"
    assert any(line.split()[1:2] == ["load"] and " 140." in line for line in lines), "a line a tick, in GB/s"


def test_one_rank_at_131_and_the_other_at_37_5_fails_both_comparisons() -> None:
    def reading(gpu: int, a: float, b: float) -> tuple[float, float]:
        return (131e9, 131e9) if gpu == 0 else (37.5e9, 37.5e9)

    checks = analyse(ticks(1.0, reading, idle=0.0), ranks())["checks"]
    assert not checks["ranks_agree"] and not checks["truth_agrees"]


def test_a_figure_that_stands_for_ten_seconds_is_a_stale_repeat() -> None:
    def reading(gpu: int, a: float, b: float) -> tuple[float, float]:
        held = RATE * 0.94 if 0 <= b < LOAD_S else 0.0  # the health read's 10-s mean, shown until the next
        return held, held

    result = analyse(ticks(1.0, reading), ranks())
    assert not result["checks"]["no_stale_repeats"]
    assert result["summary"]["longest_same_reading_ticks"] >= 9


def test_a_rate_left_after_the_traffic_ended_fails_the_idle_check() -> None:
    def reading(gpu: int, a: float, b: float) -> tuple[float, float]:
        busy = max(0.0, min(b, LOAD_S) - max(a, 0.0))
        late = 131e9 if LOAD_S <= a < LOAD_S + 2 else 0.0  # GPU 0 read 131 G/s at Util 0% with no process
        rate = RATE * busy / (b - a) + (late if gpu == 0 else 0.0)
        return rate, rate

    result = analyse(ticks(0.25, reading), ranks())
    assert not result["checks"]["idle_reads_zero"] and result["checks"]["ranks_agree"]


def lagging(lag: float) -> Reading:
    """Readings of the traffic `lag` seconds late, as GPM's NVLink figures are on an H200 (14-149 ms, 2026-11-29)."""

    def reading(gpu: int, a: float, b: float) -> tuple[float, float]:
        busy = max(0.0, min(b - lag, LOAD_S) - max(a - lag, 0.0))
        rate = RATE * busy / (b - a) * (1 + 0.001 * gpu + 0.0001 * (round(b / 0.25) % 5))
        return rate, rate

    return reading


def test_readings_a_tenth_of_a_second_late_pass_and_their_trail_is_measured() -> None:
    result = analyse(ticks(0.25, lagging(0.1)), ranks())
    assert all(result["checks"].values()), result["checks"]
    for entry in result["summary"]["gpus"].values():
        assert entry["trail_s"] == pytest.approx(0.1, abs=0.01)
    assert result["summary"]["idle"]["max_gb_s"] == pytest.approx(RATE * 0.1 / 0.25 / 1e9, rel=0.02)


def test_readings_more_than_an_interval_late_are_not_current() -> None:
    checks = analyse(ticks(0.25, lagging(0.4)), ranks())["checks"]
    assert not checks["trails_under_one_interval"] and not checks["idle_reads_zero"]


def test_missing_readings_under_load_fail_and_so_does_no_gpu_for_a_rank() -> None:
    def reading(gpu: int, a: float, b: float) -> tuple[float | None, float | None]:
        return (None, None) if gpu == 1 and 3 < b < 5 else (RATE, RATE)

    assert not analyse(ticks(1.0, reading, idle=0.0), ranks())["checks"]["readings_every_load_tick"]
    lost = ranks()
    lost[1].gpu = None
    assert analyse(ticks(1.0), lost)["checks"] == {"two_ranks_on_two_gpus": False}


def test_progress_files_are_read_while_written_and_ranks_placed_by_uuid(tmp_path: Path) -> None:
    for number, uuid in ((0, "9c5a-01"), (1, "9c5a-00")):
        head = {"rank": number, "local_rank": number, "world": 2, "pid": 100 + number, "uuid": uuid}
        lines = [head | {"tensor_bytes": SIZE, "name": "H200"}, {"t": 5.0, "n": 0, "block": 26}, {"t": 5.05, "n": 26}]
        text = "".join(json.dumps(line) + "\n" for line in lines) + '{"t": 5.1, "n'  # a line half written
        (tmp_path / f"rank{number}.jsonl").write_text(text)
    read = read_ranks(tmp_path)
    assert [rank.records for rank in read] == [[(5.0, 0), (5.05, 26)]] * 2 and not any(rank.ended for rank in read)
    assert read[0].facts["block"] == 26 and read[0].bytes_each_way == SIZE
    place_ranks(read, {0: "GPU-9C5A-00", 1: "GPU-9C5A-01"})
    assert [rank.gpu for rank in read] == [1, 0], "by UUID, not by the order CUDA numbered them"
    assert read[0].count_at(5.025) == pytest.approx(13.0) and read[0].count_at(9.0) == 26
