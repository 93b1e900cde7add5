"""The fleet's memory and time bounded whatever Prometheus answers: 2 MB label values, 10,000 GPUs, an answer
that takes too long; over a real HTTP server."""

from __future__ import annotations

import json
import time
import tracemalloc

from fleet_helpers import RANGE, recorded_prometheus, vector

from gpumon.fleet import PromClient, read_fleet
from gpumon.fleet.client import MAX_LABEL_CHARS, MAX_SERIES, PromError
from gpumon.fleet.snapshot import GPU_QUERIES, HISTORY_POINTS, HISTORY_QUERIES

NOW = 1795436099.694


def gpus(count: int, value: float = 0.5, **extra: str) -> bytes:
    return vector(*(({"host": f"node-{n // 8}", "gpu": str(n % 8), **extra}, value) for n in range(count)))


def history(count: int) -> bytes:
    points = [[NOW - 300 + 5 * n, "0.5"] for n in range(HISTORY_POINTS + 1)]
    result = [{"metric": {"host": f"node-{n // 8}", "gpu": str(n % 8)}, "values": points} for n in range(count)]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def fleet_of(count: int, **extra: str) -> dict[str, bytes]:
    answers = {promql: gpus(count, **extra) for promql in GPU_QUERIES.values()}
    answers.update({RANGE + promql: history(count) for promql in HISTORY_QUERIES.values()})
    return answers


def test_two_megabyte_label_values_are_cut() -> None:
    """Label values of 2 MB (six GPUs' worth per answer) kept whole cost the fleet 328 MB; they are cut to
    MAX_LABEL_CHARS as they are parsed, and what a refresh keeps is small."""
    huge = "x" * (2 << 20)
    with recorded_prometheus(fleet_of(6, pod=huge)) as base:
        client = PromClient(base)
        samples = client.query(GPU_QUERIES["utilization"])
        assert len(samples) == 6
        assert all(len(value) <= MAX_LABEL_CHARS for sample in samples for _, value in sample.labels)
        assert samples[0].label("pod") == "x" * (MAX_LABEL_CHARS - 1) + "…"
        tracemalloc.start()
        try:
            snapshot = read_fleet(client, now=NOW)
            kept, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert snapshot.error is None, snapshot.error
        assert len(snapshot.gpus) == 6
        assert kept < 4 << 20  # the six 2 MB values of each answer are gone once parsed


def test_ten_thousand_gpus_take_the_first_max_series_within_the_refresh() -> None:
    """10,000 GPUs took 15 s a refresh; each answer's series past MAX_SERIES are left out, and counted."""
    with recorded_prometheus(fleet_of(10_000)) as base:
        client = PromClient(base, timeout=30)
        started = time.monotonic()
        snapshot = read_fleet(client, now=NOW)
        took = time.monotonic() - started
    assert snapshot.error is None, snapshot.error
    assert len(snapshot.gpus) == MAX_SERIES
    assert snapshot.left_out == (10_000 - MAX_SERIES) * (len(GPU_QUERIES) + len(HISTORY_QUERIES))
    assert took < 10, took


def test_a_refresh_past_its_deadline_fails_in_one_line() -> None:
    with recorded_prometheus(fleet_of(4)) as base:
        client = PromClient(base)
        with client.refresh(seconds=0.0):
            try:
                client.query(GPU_QUERIES["utilization"])
            except PromError as error:
                assert "the refresh took over" in str(error)
                assert "\n" not in str(error)
            else:
                raise AssertionError("a query past the refresh's deadline was answered")
        assert len(client.query(GPU_QUERIES["utilization"])) == 4  # the deadline ends with the refresh
