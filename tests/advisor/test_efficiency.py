"""MFU and joules per sample: the peak table, the arithmetic on a job view, NVML energy counters in snapshots, and
the columns and note they add to the experiment table and the job pane."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from advisor_support import measurement
from textual.app import App, ComposeResult

from gpumon.advisor.efficiency import (
    SOURCE_COUNTER,
    SOURCE_POWER,
    EnergyLog,
    PowerSpan,
    counter_power,
    job_mfu,
    snapshot_power,
    view_joules_per_sample,
    with_efficiency,
)
from gpumon.advisor.peak_flops import (
    A10,
    A100,
    BF16,
    FP16,
    FP32,
    H100_PCIE,
    H100_SXM,
    H200,
    L40S,
    TF32,
    gpu_peaks,
    job_precision,
)
from gpumon.advisor.report import energy_note, markdown_table, table
from gpumon.advisor.results import VariantResult
from gpumon.advisor.signals import GpuSignals, Signals
from gpumon.exporter.jobs import JobMetrics
from gpumon.jobs.jobstate import HookedView, replay_messages
from gpumon.sampling.snapshot import GpuSample, ProcessSample, Snapshot
from gpumon.tui.advisor_panel import AdvisorPanel
from gpumon.tui.job_pane import efficiency_line

RECORDING = Path(__file__).resolve().parents[1] / "fixtures" / "job-cpu-run.jsonl"
BF16_AUTOCAST = {"autocast": {"enabled": True, "dtype": "torch.bfloat16", "device_type": "cuda"}}


@pytest.mark.parametrize(
    ("name", "peaks"),
    [
        ("NVIDIA H100 80GB HBM3", H100_SXM),
        ("NVIDIA H200", H200),
        ("NVIDIA H100 PCIe", H100_PCIE),
        ("NVIDIA H100 NVL", None),  # lower clocks than SXM: not guessed
        ("NVIDIA H200 NVL", None),
        ("NVIDIA A100-SXM4-80GB", A100),
        ("NVIDIA A100 80GB PCIe", A100),
        ("NVIDIA L40S", L40S),
        ("NVIDIA A10", A10),
        ("NVIDIA A10G", None),
        ("Tesla V100-SXM2-16GB", None),
        ("", None),
    ],
)
def test_the_peak_table_knows_only_gpus_it_is_sure_of(name: str, peaks: Any) -> None:
    assert gpu_peaks(name) == peaks


def test_the_h200_peaks_are_the_spec_sheet_dense_figures() -> None:
    assert (H200.tflops(BF16), H200.tflops(FP16), H200.tflops(TF32), H200.tflops(FP32)) == (989.5, 989.5, 494.5, 67.0)


@pytest.mark.parametrize(
    ("precision", "expected"),
    [
        (BF16_AUTOCAST, BF16),
        ({"autocast": {"enabled": True, "dtype": "torch.float16", "device_type": "cuda"}}, FP16),
        ({"autocast": {"enabled": True, "dtype": "torch.bfloat16", "device_type": "cpu"}}, FP32),  # not the GPU's
        ({"autocast": {"enabled": False, "dtype": "torch.bfloat16", "device_type": "cuda"}, "tf32_matmul": True}, TF32),
        ({"float32_matmul_precision": "high"}, TF32),
        ({"tf32_matmul": False, "tf32_cudnn": True, "float32_matmul_precision": "highest"}, FP32),
        ({}, FP32),
    ],
)
def test_the_precision_of_the_job(precision: dict[str, Any], expected: str) -> None:
    assert job_precision(precision) == expected


def gpu_view(flops: dict[str, Any] | None, name: str = "NVIDIA H200", precision: Any = None) -> HookedView:
    """A hooked job on GPU 0 with the hook's FLOP count `flops` (its rolling stats come from the recorded run)."""
    recorded = replay_messages(json.loads(line) for line in RECORDING.read_text().splitlines()).view()
    state = {
        "flops": flops,
        "precision": BF16_AUTOCAST if precision is None else precision,
        "cuda": {"initialized": True, "device": 0, "devices": [{"index": 0, "name": name, "uuid": "GPU-0"}]},
    }
    return replace(recorded, state=state)


COUNT = {"available": True, "reason": None, "flops_per_step": 3 * 10**12, "seq": 30, "samples": 8, "t": 1.0}


def test_mfu_is_flops_per_step_times_steps_per_second_over_the_peak() -> None:
    view = gpu_view(COUNT)
    reading = job_mfu(view, steps_per_s=100.0)
    assert reading.achieved == pytest.approx(3e14)
    assert reading.peak == pytest.approx(989.5e12)
    assert reading.value == pytest.approx(3e14 / 989.5e12)
    assert (reading.gpu, reading.precision, reading.reason) == ("H200", BF16, "")
    # By default, at the view's rolling step rate.
    assert job_mfu(view).value == pytest.approx(3e12 * view.stats.steps_per_s / 989.5e12)


def test_mfu_says_why_it_is_not_available() -> None:
    assert "no FLOP count yet" in job_mfu(gpu_view(None)).reason
    refused = {"available": False, "reason": "the job uses torch.compile: ...", "t": 1.0}
    assert "torch.compile" in job_mfu(gpu_view(refused)).reason
    unknown = job_mfu(gpu_view(COUNT, name="NVIDIA GeForce RTX 4090"), steps_per_s=10.0)
    assert unknown.value is None and unknown.achieved == pytest.approx(3e13)
    assert unknown.reason == "GPU not in the peak table"
    fp32 = job_mfu(gpu_view(COUNT, precision={}), steps_per_s=10.0)
    assert fp32.value == pytest.approx(3e13 / 67.0e12) and fp32.precision == FP32


def test_convolutions_are_held_against_the_tf32_peak_cudnn_allows_by_default() -> None:
    """A fp32 conv net: cuDNN may use TF32 for its convolutions (torch's default) while its matmuls stay fp32, so
    its peak is the rate of its FLOPs each at its own peak, not the fp32 peak (which made a ResNet's MFU 54%)."""
    conv_net = {**COUNT, "conv_flops_per_step": 2 * 10**12}  # 2 of the 3 TFLOP in convolutions
    fp32_matmuls = {"tf32_matmul": False, "tf32_cudnn": True}
    reading = job_mfu(gpu_view(conv_net, precision=fp32_matmuls), steps_per_s=10.0)
    blended = 3e12 / (1e12 / 67.0e12 + 2e12 / 494.5e12)
    assert reading.peak == pytest.approx(blended) and reading.precision == "tf32 conv/fp32 matmul"
    assert reading.value == pytest.approx(3e13 / blended)
    all_tf32 = job_mfu(gpu_view(conv_net, precision={**fp32_matmuls, "tf32_matmul": True}), steps_per_s=10.0)
    assert all_tf32.peak == pytest.approx(494.5e12) and all_tf32.precision == TF32
    no_tf32 = job_mfu(gpu_view(conv_net, precision={"tf32_matmul": False, "tf32_cudnn": False}), steps_per_s=10.0)
    assert no_tf32.peak == pytest.approx(67.0e12) and no_tf32.precision == FP32
    autocast = job_mfu(gpu_view(conv_net, precision=BF16_AUTOCAST), steps_per_s=10.0)
    assert autocast.peak == pytest.approx(989.5e12) and autocast.precision == BF16


def snapshots_with_energy(watts: float, seconds: int, every: int = 10, start: float = 1000.0) -> list[Snapshot]:
    """One snapshot a second of a GPU drawing `watts`, its energy counter read every `every` seconds (the sampler's
    health interval): between reads each snapshot repeats the last reading, as the sampler does."""
    snapshots = []
    energy = 5e6
    for second in range(seconds):
        t = start + second
        if second % every == 3 % every:
            energy = 5e6 + watts * second
        gpu = GpuSample(index=0, uuid="GPU-0", name="NVIDIA H200", energy_total=energy, power=watts * 0.9)
        snapshots.append(Snapshot(timestamp=t, gpus=(gpu,), processes=(ProcessSample(pid=42, gpu_indices=(0,)),)))
    return snapshots


def test_power_from_the_energy_counter_uses_only_fresh_readings() -> None:
    window = snapshots_with_energy(612.0, 45)[5:]  # opens 2 s after a reading: its first value is stale
    span = snapshot_power(window, [0])
    assert span is not None and span.source == SOURCE_COUNTER
    assert span.watts == pytest.approx(612.0)
    assert (span.start, span.end) == (1013.0, 1043.0)


def test_a_window_with_one_fresh_reading_falls_back_to_the_power_draw() -> None:
    span = snapshot_power(snapshots_with_energy(612.0, 12), [0])
    assert span is not None and span.source == SOURCE_POWER
    assert span.watts == pytest.approx(612.0 * 0.9)


def test_a_counter_that_goes_back_is_not_used() -> None:
    readings = [(0.0, 10.0), (1.0, 20.0), (2.0, 30.0), (3.0, 5.0)]
    assert counter_power(readings) is None
    assert counter_power([(0.0, 10.0), (1.0, 20.0), (2.0, 30.0)]) == (1.0, 2.0, 10.0)


def test_several_gpus_add_up() -> None:
    one = snapshots_with_energy(300.0, 45)
    two = [
        replace(s, gpus=(*s.gpus, replace(s.gpus[0], index=1, uuid="GPU-1", energy_total=2 * s.gpus[0].energy_total)))
        for s in one
    ]
    span = snapshot_power(two, [0, 1])
    assert span is not None and span.gpus == 2
    assert span.watts == pytest.approx(300.0 + 600.0)


def test_joules_per_sample_of_a_recorded_job_view() -> None:
    view = gpu_view(COUNT)
    inner = view.step_sums[1:-1]  # whole seconds of steps
    power = PowerSpan(watts=500.0, start=inner[0].first_t, end=inner[-1].last_t, gpus=1)
    samples = sum(second.samples for second in inner)
    assert samples > 0
    assert view_joules_per_sample(view, power) == pytest.approx(500.0 / (samples / power.seconds))
    assert view_joules_per_sample(view, None) is None


def test_the_job_views_energy_log_follows_the_jobs_gpus() -> None:
    log = EnergyLog()
    for snapshot in snapshots_with_energy(612.0, 45):
        log.add(snapshot)
        log.add(snapshot)  # shown again on a resize: not a second reading
    assert log.gpus_of(42) == ("GPU-0",) and log.gpus_of(7) == ()
    span = log.power(["GPU-0"])
    assert span is not None and span.watts == pytest.approx(612.0)
    assert log.power([]) is None and log.power(["GPU-9"]) is None


def test_the_energy_log_gives_the_pane_gpu_util_over_the_recent_seconds() -> None:
    # The job pane's step model reads GPU busy from GPU-Util, as diagnose and the exporter do.
    log = EnergyLog()
    for second in range(30):
        util = 20.0 if second < 20 else 80.0
        gpu = GpuSample(index=0, uuid="GPU-0", name="NVIDIA H200", utilization_gpu=util)
        log.add(Snapshot(timestamp=1000.0 + second, gpus=(gpu,)))
    assert log.utilization(["GPU-0"], 9.5) == pytest.approx(0.8)
    assert log.utilization(["GPU-0"], 19.5) == pytest.approx((10 * 20 + 10 * 80) / 20 / 100)
    assert log.utilization(["GPU-9"], 10.0) is None and log.utilization([], 10.0) is None


def test_a_measurement_gets_its_mfu_and_joules_per_sample() -> None:
    measured = measurement(4000.0, 4000.0, 4000.0)  # 30 steps in 12 s
    signals = Signals.of(gpus=(GpuSignals(index=0),))
    result = with_efficiency(measured, snapshots_with_energy(612.0, 45), signals, gpu_view(COUNT))
    assert result.mfu == pytest.approx(3e12 * 30 / 12.0 / 989.5e12)
    assert result.joules_per_sample == pytest.approx(612.0 / 4000.0)
    assert result.to_dict()["joules_per_sample"] == pytest.approx(0.153)
    assert type(result).from_dict(result.to_dict()).mfu == pytest.approx(result.mfu, abs=1e-4)
    cpu = with_efficiency(measured, [], Signals.of(), None)
    assert (cpu.mfu, cpu.joules_per_sample) == (None, None)


def row(label: str, rate: float, mfu: float | None, joules: float | None, kept: bool = False) -> VariantResult:
    m = replace(measurement(rate, rate), mfu=mfu, joules_per_sample=joules)
    return VariantResult(label=label, change={}, knobs={}, kind="trial", measurement=m, kept=kept)


ROWS = [
    row("baseline", 1000.0, 0.12, 0.500),
    row("batch_size 64 -> 256", 1500.0, 0.18, 0.600, kept=True),
    row("num_workers 0 -> 8", 1400.0, 0.17, 0.350),
]


def test_the_experiment_table_shows_mfu_and_joules_and_a_costlier_win_says_so() -> None:
    lines = table(ROWS).splitlines()
    assert "MFU" in lines[0] and "J/sample" in lines[0]
    header = re.split(r"\s{2,}", lines[0].strip())
    baseline = dict(zip(header, re.split(r"\s{2,}", lines[1].strip()), strict=True))
    bigger = dict(zip(header, re.split(r"\s{2,}", lines[2].strip()), strict=True))
    assert (baseline["MFU"], baseline["J/sample"]) == ("12%", "0.5")
    assert "J/sample" not in baseline["result"]  # the baseline: no energy note
    assert (bigger["MFU"], bigger["J/sample"]) == ("18%", "0.6")
    assert lines[2].endswith("kept (faster but +20% J/sample)")
    assert "J/sample" not in lines[3]  # faster and cheaper per sample: nothing to say
    markdown = markdown_table(ROWS).splitlines()
    assert markdown[0] == (
        "| step | GPU-Util | SM active | samples/s | speed-up | noise | peak mem | MFU | J/sample | result |"
    )
    assert markdown[3].endswith("| 1.5x | ±0.0% | - | 18% | 0.6 | kept (faster but +20% J/sample) |")


def test_no_energy_note_without_both_figures_or_without_a_speed_up() -> None:
    base, slower = ROWS[0].measurement, replace(measurement(900.0), joules_per_sample=0.9)
    assert energy_note(slower, base) == ""
    assert energy_note(replace(measurement(2000.0), joules_per_sample=None), base) == ""


def test_the_job_pane_line_names_the_peak_it_measures_against() -> None:
    power = PowerSpan(watts=612.0, start=0.0, end=1.0, gpus=1)
    text = efficiency_line(gpu_view(COUNT), power).plain
    assert text.startswith("Effic.  MFU ")
    assert "of H200 bf16 990 TFLOP/s, spec-sheet dense peak" in text
    assert "J/sample N/A" in text  # the power span holds none of the recorded steps
    view = gpu_view(COUNT)
    first, last = view.step_sums[0].first_t, view.step_sums[-1].last_t
    text = efficiency_line(view, PowerSpan(watts=612.0, start=first, end=last, gpus=1)).plain
    assert "J/sample (612 W)" in text
    assert "MFU N/A (no FLOP count yet" in efficiency_line(gpu_view(None), None).plain


class PanelHost(App[None]):
    def compose(self) -> ComposeResult:
        yield AdvisorPanel(id="advisor")


async def test_the_advisor_panel_has_the_mfu_and_joules_columns() -> None:
    app = PanelHost()
    async with app.run_test() as pilot:
        panel = app.query_one(AdvisorPanel)
        for result in ROWS[:2]:
            panel.add_result(result)
        await pilot.pause()
        lines = panel.results_text().splitlines()
        assert "MFU" in "".join(lines[:2]) and "J/sample" in "".join(lines[:2])
        assert "18%" in "".join(lines[-4:]) and "0.6" in "".join(lines[-4:])
        assert "faster but +20% J/sample" in lines[-1]


def test_the_exporter_exports_a_ranks_mfu_and_joules_per_sample() -> None:
    view = gpu_view(COUNT)
    start, end = view.step_sums[0].first_t, view.step_sums[-1].last_t
    snapshots = snapshots_with_energy(612.0, int(end - start) + 1, every=2, start=start)
    metrics = JobMetrics()
    figures = metrics._figures(replace(view, pid=42), snapshots, start, end)
    assert figures.signals.step.steps_per_s and figures.signals.step.samples_per_s
    assert figures.mfu == pytest.approx(3e12 * figures.signals.step.steps_per_s / 989.5e12)
    assert figures.joules_per_sample == pytest.approx(612.0 / figures.signals.step.samples_per_s, rel=0.01)
    metrics.figures = (figures,)
    exported = {family.name: family.samples for family in metrics.families("h")}
    (mfu,) = exported["gpumon_job_mfu_ratio"]
    (joules,) = exported["gpumon_job_energy_per_sample_joules"]
    assert (mfu.value, joules.value) == (pytest.approx(figures.mfu), pytest.approx(figures.joules_per_sample))
