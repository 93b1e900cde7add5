"""Printing results: the experiment table (text), the same as Markdown, and a finding as text."""

from __future__ import annotations

from collections.abc import Sequence

from gpumon import units
from gpumon.advisor.measure import Measurement, speedup
from gpumon.advisor.results import OK, GuidedReport, VariantResult
from gpumon.advisor.rules import Finding
from gpumon.advisor.signals import Signals
from gpumon.jobs.step_model import BY_NVML, LABELS, SHOWN_MIN, shown_shares
from gpumon.printable import printable, printable_or

HEADERS = ("step", "GPU-Util", "SM active", "samples/s", "speed-up", "noise", "peak mem", "MFU", "J/sample", "result")
WIDTHS = (26, 10, 11, 11, 10, 8, 10, 7, 10)
"""Column widths of the text table; the last column takes the rest."""


ABSENT = "-"
"""A cell without a value."""
ENERGY_NOTE_MIN = 0.05
"""A faster variant whose joules per sample exceed the baseline's by more than this share says so."""
IDLE_LINES_SHOWN = 3
"""The job's lines where the GPU idled most that the step model's text names."""


def rate_cell(rate: float | None) -> str:
    """Samples (or steps) per second: '1,234', '12.3'."""
    return units.amount(rate, missing=ABSENT)


def percent_cell(value: float | None) -> str:
    """GPU-Util or SM activity: '52%', '5.2%' under 10."""
    return units.percent(value, fine=True, missing=ABSENT)


def memory_cell(value: float | None) -> str:
    """Peak memory: '3.0 GiB', '512 MiB'."""
    return units.size(value, missing=ABSENT)


def mfu_cell(value: float | None) -> str:
    """MFU against the spec-sheet dense peak: '41%', '3.2%'."""
    return percent_cell(None if value is None else value * 100)


def joules_cell(value: float | None) -> str:
    """Joules per sample: '2.31', '0.0123'."""
    return ABSENT if value is None else f"{value:.3g}"


def energy_note(measurement: Measurement | None, baseline: Measurement | None) -> str:
    """'faster but +12% J/sample': a variant that wins on speed while each sample costs more energy."""
    if measurement is None or baseline is None:
        return ""
    joules, base_joules = measurement.joules_per_sample, baseline.joules_per_sample
    gain = speedup(measurement, baseline)
    if joules is None or not base_joules or gain is None or gain <= 1.0:
        return ""
    change = joules / base_joules - 1.0
    return f"faster but +{change * 100:.0f}% J/sample" if change > ENERGY_NOTE_MIN else ""


def with_note(text: str, note: str) -> str:
    return f"{text} ({note})" if text and note else (text or note)


def result_text(result: VariantResult, is_baseline: bool = False) -> str:
    """The result column: the row's word and its reason ('inconclusive: noise ±91% ...; to decide: ...'), from the
    same VariantResult.outcome the panel and the verdict read."""
    word, reason = result.outcome(is_baseline)
    if is_baseline and result.status == OK:
        return printable(reason)
    text = f"{word}: {printable(reason)}" if reason and not reason.startswith(word) else printable(reason or word)
    if result.flags and result.kept:
        text += f" ({'; '.join(result.flags)})"
    return text


def _cells(result: VariantResult, baseline: Measurement | None, is_baseline: bool) -> list[str]:
    m = result.measurement
    gain = speedup(m, baseline)
    shown = m is not None and bool(m.rates)
    return [
        result.label,
        percent_cell(m.gpu_util) if shown and m else "-",
        percent_cell(m.sm_activity) if shown and m else "-",
        rate_cell(m.rate) if shown and m else "-",
        f"{gain:.1f}x" if gain is not None and shown else "-",
        f"±{m.noise * 100:.1f}%" if shown and m else "-",
        memory_cell(m.peak_memory) if shown and m else "-",
        mfu_cell(m.mfu) if shown and m else "-",
        joules_cell(m.joules_per_sample) if shown and m else "-",
        with_note(result_text(result, is_baseline), "" if is_baseline or not shown else energy_note(m, baseline)),
    ]


def _unit(rows: Sequence[VariantResult]) -> str:
    found = {r.measurement.unit for r in rows if r.measurement is not None and r.measurement.rates}
    return found.pop() if len(found) == 1 else "samples/s"


def table(rows: Sequence[VariantResult]) -> str:
    """The results as a text table (step, GPU-Util, SM active, samples/s, speed-up), then the noise
    (half the range of the measured windows), the peak memory and what happened to the variant."""
    if not rows:
        return ""
    baseline = rows[0].measurement
    headers = list(HEADERS)
    headers[3] = _unit(rows)
    body = [_cells(row, baseline, index == 0) for index, row in enumerate(rows)]
    widths = list(WIDTHS)
    widths[0] = max(widths[0], max(len(cells[0]) for cells in body) + 2)
    lines = []
    for cells in [headers, *body]:
        line = "".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + cells[-1]
        lines.append(line.rstrip())
    return "\n".join(lines)


def markdown_table(rows: Sequence[VariantResult]) -> str:
    if not rows:
        return ""
    baseline = rows[0].measurement
    headers = list(HEADERS)
    headers[3] = _unit(rows)
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(["---"] + ["---:"] * 8 + ["---"]) + " |"]
    for index, row in enumerate(rows):
        cells = [cell.replace("|", "\\|") for cell in _cells(row, baseline, index == 0)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def finding_text(finding: Finding) -> str:
    lines = [
        f"{finding.headline} (confidence {finding.confidence:.0%}, {finding.source or 'no job data'})",
        f"  evidence: {printable(finding.evidence)}",
        f"  what to do: {finding.advice}",
    ]
    for other in finding.secondary:
        lines.append(f"  also: {other.category}: {printable(other.evidence)} (confidence {other.confidence:.0%})")
    return "\n".join(lines)


def step_model_lines(signals: Signals | None) -> list[str]:
    """'Step time: GPU busy 74%, ...' and 'GPU idle at: train.py:42 (preprocess) 77%, ...' (none without a step
    model)."""
    if signals is None or not signals.step_model.step_shares:
        return []
    busy_from = "GPU-Util" if signals.step_model.step_busy_from == BY_NVML else "the training stream"
    parts = ", ".join(f"{LABELS[owner]} {share:.0%}" for owner, share in shown_shares(signals.step_model.step_shares))
    lines = [f"Step time: {parts} (GPU busy from {busy_from})"]
    idle = [
        f"{printable(where)} {share:.0%}"
        for where, share in zip(signals.step_model.idle_lines, signals.step_model.idle_line_shares, strict=False)
        if share >= SHOWN_MIN
    ][:IDLE_LINES_SHOWN]
    if idle:
        lines.append(f"GPU idle at: {', '.join(idle)}")
    return lines


def report_text(report: GuidedReport) -> str:
    parts = []
    if report.finding is not None:
        parts.append(finding_text(report.finding))
    step_model = step_model_lines(report.baseline.signals)
    if step_model:
        parts.append("\n".join(step_model))
    parts.append(table(report.rows))
    parts.append(f"verdict: {printable(report.verdict)}")
    if report.kept:
        parts.append("code change:\n" + "\n".join(f"    {line}" for line in report.code))
    for offer in report.offers:
        parts.append(f"trial run: {printable(offer.text())}")
    for line in report.advice:
        parts.append(f"also needs a code change: {line}")
    for line in report.skipped:
        parts.append(f"not tried: {line}")
    if report.stopped:
        parts.append(f"stopped: {printable(report.stopped)}")
    for knob in report.unrestored:
        parts.append(f"not put back: {printable(knob.text())}")
    if report.meta.get("logs"):
        parts.append(f"each trial's output: {printable_or(report.meta['logs'])}")
    return "\n\n".join(parts)


def report_markdown(report: GuidedReport, title: str = "gpumon experiments") -> str:
    meta = report.meta
    lines = [f"# {title}", ""]
    described = [
        f"{key}: {printable_or(meta[key])}"
        for key in ("device", "date", "command", "runner", "wall_s", "trial_starts")
        if meta.get(key)
    ]
    if described:
        lines += ["; ".join(described), ""]
    if report.finding is not None:
        f = report.finding
        lines += [f"**Diagnosis**: `{f.category}` ({f.confidence:.0%}): {printable(f.evidence)}", ""]
    step_model = step_model_lines(report.baseline.signals)
    if step_model:
        lines += ["  \n".join(step_model), ""]
    lines += [markdown_table(report.rows), ""]
    lines += [f"**Verdict**: {printable(report.verdict)}", ""]
    if report.kept:
        lines += ["```python", *report.code, "```", ""]
    for offer in report.offers:
        lines += [f"- trial run: {printable(offer.text())}"]
    for line in report.advice:
        lines += [f"- also needs a code change: `{line}`"]
    for line in report.skipped:
        lines += [f"- not tried: {line}"]
    flagged = sorted({flag for row in report.variants if row.kept for flag in row.flags})
    for flag in flagged:
        lines += [f"- note: {flag}"]
    if report.stopped:
        lines += [f"- stopped: {printable(report.stopped)}"]
    for knob in report.unrestored:
        lines += [f"- not put back: {printable(knob.text())}"]
    lines += [
        "",
        "samples/s: mean of the measured windows (warm-up excluded); noise: half their range; "
        "speed-up against the baseline; peak mem: torch.cuda.max_memory_allocated.",
    ]
    return "\n".join(lines).rstrip() + "\n"
