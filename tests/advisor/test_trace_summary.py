"""The profiler trace summary on a hand-written GPU-like trace (numbers worked out by hand), bad files, and the
comm_bound rule on summaries."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.advisor.categories import COMM_BOUND, HEADLINES
from gpumon.advisor.rules import COMM_EXPOSED_SHARE, diagnose, rule_comm
from gpumon.advisor.signals import Signals
from gpumon.advisor.trace_summary import (
    IdleGap,
    TraceError,
    intersect,
    merge,
    read_trace,
    summarize,
    summarize_file,
    summary_lines,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "profiler" / "synthetic_gpu_trace.json"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@pytest.fixture
def gz_fixture(tmp_path: Path) -> str:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    return str(path)


def test_the_synthetic_trace_sums_as_worked_out_by_hand(gz_fixture: str) -> None:
    summary = summarize_file(gz_fixture)
    # Two ProfilerStep#k user annotations of 10 ms; the gpu_user_annotation copy is not a step.
    assert summary.steps == 2 and summary.step_ms == 10.0
    assert summary.cuda and summary.devices == (0, 1)
    # sgemm_a 2+2 ms on GPU 0 and 1 ms on GPU 1; NCCL 3+1 ms; elementwise 0.5 ms. Malformed events are skipped.
    assert summary.kernels == 6 and summary.kernel_ms == 9.5
    assert [(k.name, k.count, k.total_ms) for k in summary.top_kernels] == [
        ("sgemm_a", 3, 5.0),
        (NCCL, 2, 4.0),
        ("elementwise_b", 1, 0.5),
    ]
    # GPU 0 busy: [500,900] [950,960] [1000,5000] [10500,10600] [11000,14000] [14500,14550] us = 7560 us of a
    # 14050 us span; GPU 1: 1000 us of 1000 us.
    assert summary.gpu_busy_ms == 8.56 and summary.gpu_span_ms == 15.05
    assert summary.gpu_idle_ms == pytest.approx(6.49)
    assert summary.idle_gaps == (
        IdleGap(0, 4.5, 5.5),
        IdleGap(0, 13.5, 0.5),
        IdleGap(0, 10.1, 0.4),
        IdleGap(0, 0.4, 0.05),
        IdleGap(0, 0.46, 0.04),
    )
    assert (summary.htod.count, summary.htod.ms, summary.htod.bytes) == (2, 0.5, 5_000_000)
    assert (summary.htod.pageable_bytes, summary.htod.pageable_ms, summary.htod.pageable_share) == (4_000_000, 0.4, 0.8)
    assert (summary.dtoh.count, summary.dtoh.bytes, summary.dtoh.pageable_share) == (1, 4096, 1.0)
    # NCCL [2000,5000] overlaps sgemm [1000,3000] for 1 ms and elementwise [3500,4000] for 0.5 ms; NCCL
    # [13000,14000] overlaps nothing on GPU 0 (GPU 1's kernel at the same time is another device).
    assert (summary.nccl_kernels, summary.nccl_ms, summary.nccl_overlap_ms) == (2, 4.0, 1.5)
    assert summary.nccl_exposed_ms == 2.5 and summary.nccl_overlap_share == 0.375
    assert summary.signal_values() == {
        "capture_steps": 2,
        "capture_step_ms": 10.0,
        "comm_ms_per_step": 2.0,
        "comm_exposed_ms_per_step": 1.25,
        "comm_overlap_share": 0.375,
    }


def test_the_summary_serializes_and_prints(gz_fixture: str) -> None:
    summary = summarize_file(gz_fixture)
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["htod"]["pageable_share"] == 0.8 and data["nccl_exposed_ms"] == 2.5
    text = "\n".join(summary_lines(summary))
    assert "6 kernels, 9.5 ms kernel time" in text
    assert "pageable 80% of the bytes" in text
    assert "NCCL: 2 kernels, 4.0 ms; overlaps compute 38%; exposed 2.5 ms (1.2 ms a step)" in text
    assert "largest idle gaps: 5.5 ms at +4.5 ms (GPU 0)" in text
    assert "sgemm_a" in text


def test_a_cpu_only_trace_says_there_are_no_cuda_kernels() -> None:
    trace = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}
    summary = summarize(trace, "cpu.json.gz")
    assert not summary.cuda and summary.kernels == 0 and summary.signal_values()["comm_exposed_ms_per_step"] is None
    assert any("no CUDA kernels" in line for line in summary_lines(summary))


def test_kernel_names_from_the_trace_are_made_printable() -> None:
    trace = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "evil\x1b[2Jkernel", "ts": 0, "dur": 5}]}
    text = "\n".join(summary_lines(summarize(trace, "t")))
    assert "\x1b" not in text and "evil" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json at all", "is not JSON"),
        (b'{"traceEvents": 3}', "not a Chrome trace"),
        (b"[1, 2]", "not a Chrome trace"),
        (b"\x1f\x8b\x08\x00garbage", "cannot read the trace"),
    ],
)
def test_a_bad_trace_is_one_clear_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as raised:
        read_trace(str(path))
    assert "\n" not in str(raised.value)


def test_a_missing_trace_and_a_decompression_bomb_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace(str(tmp_path / "nope.json.gz"))
    import gpumon.advisor.trace_summary as trace_summary

    monkeypatch.setattr(trace_summary, "MAX_TRACE_JSON", 1000)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * 100_000 + b"]}"))
    assert os.path.getsize(bomb) < 1000
    with pytest.raises(TraceError, match="more than"):
        read_trace(str(bomb))


def test_interval_union_and_intersection() -> None:
    assert merge([(5, 6), (1, 3), (2, 4), (4, 4.5)]) == [(1, 4.5), (5, 6)]
    assert intersect([(0, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]
    assert intersect([(0, 1)], [(1, 2)]) == []


# -- comm_bound ---------------------------------------------------------------------------------------------------


def _with_capture(**capture: object) -> Signals:
    base = Signals.of(
        source="hook", device="cuda", steps=50, step_ms=40.0, gpu_util=95.0, gpu_share=0.9, data_share=0.0
    )
    return replace(base, comm=replace(base.comm, **capture))  # type: ignore[arg-type]


def test_comm_bound_fires_on_exposed_nccl_time_with_its_evidence() -> None:
    signals = _with_capture(
        capture_steps=10,
        capture_step_ms=40.0,
        comm_ms_per_step=20.0,
        comm_exposed_ms_per_step=12.0,
        comm_overlap_share=0.4,
    )
    candidate = rule_comm(signals)
    assert candidate is not None and candidate.category == COMM_BOUND
    assert candidate.severity == pytest.approx(0.3)
    assert candidate.numbers["comm_exposed_ms_per_step"] == 12.0 and candidate.numbers["comm_overlap_share"] == 0.4
    assert "NCCL exposed 12.0 ms of each 40.0 ms step (30%)" in candidate.evidence
    assert "40% of the NCCL time (20.0 ms a step) overlaps compute" in candidate.evidence
    finding = diagnose(signals)
    assert finding.category == COMM_BOUND and finding.headline == HEADLINES[COMM_BOUND]


def test_comm_bound_stays_quiet_below_its_threshold_and_without_a_capture(gz_fixture: str) -> None:
    assert rule_comm(_with_capture()) is None
    hidden = _with_capture(capture_step_ms=40.0, comm_ms_per_step=20.0, comm_exposed_ms_per_step=2.0)
    assert rule_comm(hidden) is None  # 5% of the step exposed
    # The synthetic trace: 1.25 ms exposed of a 10 ms step = 12.5%, under the 15% bar.
    from_trace = _with_capture(**summarize_file(gz_fixture).signal_values())
    assert COMM_EXPOSED_SHARE > 1.25 / 10.0 and rule_comm(from_trace) is None


def test_comm_bound_round_trips_through_signals_json() -> None:
    signals = _with_capture(capture_steps=5, capture_step_ms=30.0, comm_exposed_ms_per_step=9.0, comm_ms_per_step=9.0)
    again = Signals.from_dict(json.loads(json.dumps(signals.to_dict())))
    assert again == signals
    assert diagnose(again).category == COMM_BOUND
