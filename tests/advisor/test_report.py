"""The results table as text, its Markdown form, and the finding as text."""

from __future__ import annotations

from advisor_support import measurement

from gpumon.advisor.measure import Measurement
from gpumon.advisor.report import markdown_table, report_markdown, report_text, table
from gpumon.advisor.results import FAILED, NOT_APPLIED, GuidedReport, VariantResult
from gpumon.advisor.rules import Finding

GIB = 1 << 30


def row(
    label: str,
    m: Measurement | None,
    *,
    kept: bool = False,
    status: str = "ok",
    reason: str = "",
    flags: tuple[str, ...] = (),
) -> VariantResult:
    return VariantResult(
        label=label,
        change={},
        knobs={},
        kind="trial",
        status=status,
        reason=reason,
        measurement=m,
        kept=kept,
        flags=flags,
    )


ROWS = [
    row("baseline", measurement(1010, 1010, 1010, util=25, sm=12, peak=2 * GIB)),
    row("num_workers 0 -> 12", measurement(4100, 4100, 4100, util=97, sm=72, peak=2 * GIB), kept=True),
    row(
        "amp_bf16 off -> on",
        None,
        status=NOT_APPLIED,
        reason="amp_bf16: needs a code change (the command does not read it from GPUMON_KNOBS)",
    ),
    row("batch_size 32 -> 256", None, status=FAILED, reason="out of memory"),
]


def test_the_text_table_has_design_md_columns_and_layout() -> None:
    lines = table(ROWS).splitlines()
    assert lines[0].startswith("step                      GPU-Util  SM active  samples/s  speed-up")
    assert lines[1].startswith("baseline                  25%       12%        1,010      1.0x")
    assert lines[2].startswith("num_workers 0 -> 12       97%       72%        4,100      4.1x")
    assert lines[2].endswith("kept")
    assert "not applied: amp_bf16: needs a code change" in lines[3]
    assert lines[4].endswith("failed: out of memory")


def test_noise_and_peak_memory_follow_the_design_columns() -> None:
    noisy = [row("baseline", measurement(90, 110, util=30, sm=10, peak=3 * GIB))]
    line = table(noisy).splitlines()[1]
    assert "±10.0%" in line and "3.0 GiB" in line


def test_steps_per_second_is_named_when_the_batch_size_is_unknown() -> None:
    steps_only = [row("baseline", Measurement(rates=(12.0, 12.0), unit="steps/s"))]
    assert "steps/s" in table(steps_only).splitlines()[0]


def test_the_markdown_table_has_one_row_per_variant() -> None:
    lines = markdown_table(ROWS).splitlines()
    assert lines[0] == (
        "| step | GPU-Util | SM active | samples/s | speed-up | noise | peak mem | MFU | J/sample | result |"
    )
    assert lines[1].startswith("| --- | ---: |")
    assert len(lines) == 2 + len(ROWS)
    assert lines[3].startswith("| num_workers 0 -> 12 | 97% | 72% | 4,100 | 4.1x |")


def test_the_report_shows_the_code_change_for_what_was_kept() -> None:
    report = GuidedReport(
        baseline=ROWS[0],
        variants=tuple(ROWS[1:]),
        kept={"num_workers": 12},
        code=("DataLoader(..., num_workers=12)",),
        finding=Finding("input_bound", "waits for data 71% of each step", 0.9, 0.71, source="hook"),
        stopped="nothing else won beyond the noise",
        meta={"device": "NVIDIA H100", "date": "x"},
    )
    text = report_text(report)
    assert "evidence: waits for data 71% of each step" in text
    assert "DataLoader(..., num_workers=12)" in text and "(4.1x)" in text
    markdown = report_markdown(report)
    assert markdown.startswith("# gpumon experiments\n\ndevice: NVIDIA H100; date: x")
    assert "```python\nDataLoader(..., num_workers=12)\n```" in markdown
    assert "**Diagnosis**: `input_bound` (90%)" in markdown
