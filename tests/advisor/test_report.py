"""The results table as text, its Markdown form, and the finding as text."""

from __future__ import annotations

from dataclasses import replace

from advisor_support import measurement

from gpumon.advisor.measure import Measurement
from gpumon.advisor.report import markdown_table, report_markdown, report_text, step_model_lines, table
from gpumon.advisor.results import FAILED, NOT_APPLIED, GuidedReport, VariantResult
from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals

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


STEP_SIGNALS = Signals.of(
    step_shares={
        "gpu_busy": 0.7412,
        "data": 0.004,
        "h2d": 0.0,
        "sync_wait": 0.0,
        "sync_idle": 0.2388,
        "comm": 0.0,
        "launch": 0.016,
        "cpu": 0.0,
        "other": 0.0,
    },
    step_busy_from="nvml",
    step_samples=400,
    idle_lines=("train.py:42 (pre\x1bprocess)", "train.py:50 (step)", "loader.py:7 (fetch)", "a.py:1 (b)"),
    idle_line_shares=(0.2, 0.03, 0.02, 0.015),
    idle_line_activities=("sync", "forward", "data_wait", "cpu"),
)


def test_the_step_model_is_one_line_of_owners_and_one_of_idle_lines() -> None:
    step, idle = step_model_lines(STEP_SIGNALS)
    # Owners under 1% (data 0.4%) are left out; the rest in the bar's order.
    assert (
        step
        == "Step time: GPU busy 74%, GPU idle after syncs 24%, torch dispatch and launch 2% (GPU busy from GPU-Util)"
    )
    # The job's own strings made printable; three lines at most.
    assert idle == "GPU idle at: train.py:42 (pre\\x1bprocess) 20%, train.py:50 (step) 3%, loader.py:7 (fetch) 2%"


def test_no_step_model_lines_without_a_model_and_no_idle_line_without_lines() -> None:
    assert step_model_lines(Signals.of()) == []
    assert step_model_lines(None) == []
    (only,) = step_model_lines(
        replace(
            STEP_SIGNALS,
            step_model=replace(STEP_SIGNALS.step_model, idle_lines=(), idle_line_shares=(), step_busy_from="stream"),
        )
    )
    assert only.endswith("(GPU busy from the training stream)")


def test_the_experiment_report_shows_the_baselines_step_model() -> None:
    baseline = replace(ROWS[0], signals=STEP_SIGNALS)
    text = report_text(GuidedReport(baseline=baseline, variants=tuple(ROWS[1:])))
    assert "\nStep time: GPU busy 74%, GPU idle after syncs 24%" in "\n" + text
    assert "GPU idle at: train.py:42 (pre\\x1bprocess) 20%" in text
    assert "Step time:" not in report_text(GuidedReport(baseline=ROWS[0], variants=tuple(ROWS[1:])))
    assert "GPU idle at: train.py:42" in report_markdown(GuidedReport(baseline=baseline))
