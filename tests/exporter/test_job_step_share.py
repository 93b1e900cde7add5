"""The step model in the exporter: gpumon_job_step_share_ratio{owner} per rank, adding up to 1, none without a model."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpumon.exporter.jobs import LABELS, JobMetrics
from gpumon.jobs.jobstate import replay_messages
from gpumon.jobs.step_model import CPU, GPU_BUSY, LAUNCH, OWNERS
from gpumon.protocol import activity
from tests.jobs.host_messages import hosted_view, recorded_messages, state_times

# 20 samples a second: the main thread in its own Python 12 of them (the GPU idle), launching 8 (the GPU busy at 6).
PER_SECOND = {activity.CPU: (12, 0, 0), activity.FORWARD: (2, 6, 0)}


def exported_shares(metrics: JobMetrics) -> dict[str, tuple[dict[str, str], float]]:
    (family,) = [family for family in metrics.families("node-a") if family.name == "gpumon_job_step_share_ratio"]
    return {sample.labels["owner"]: (sample.labels, sample.value) for sample in family.samples}


def test_a_ranks_step_model_is_exported_by_owner_and_adds_up_to_one() -> None:
    view = replace(hosted_view(PER_SECOND), pid=42)
    end = state_times()[-1]
    metrics = JobMetrics()
    metrics.figures = (metrics._figures(view, [], end - 30.0, end),)
    shares = exported_shares(metrics)
    assert list(shares) == list(OWNERS)
    assert math.fsum(value for _labels, value in shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert shares[GPU_BUSY][1] == pytest.approx(0.3, abs=1e-3)  # 6 busy of 20 samples (no GPU-Util: the stream)
    assert shares[CPU][1] == pytest.approx(0.6, abs=1e-3)
    assert shares[LAUNCH][1] == pytest.approx(0.1, abs=1e-3)
    labels, _value = shares[CPU]
    assert set(labels) == {*LABELS, "owner"}
    assert (labels["host"], labels["pid"], labels["command"]) == ("node-a", "42", "hooked_train.py")


def test_a_rank_without_the_sampler_has_no_step_share_series() -> None:
    view = replace(replay_messages(recorded_messages()).view(), pid=43)
    end = state_times()[-1]
    metrics = JobMetrics()
    figures = metrics._figures(view, [], end - 30.0, end)
    assert figures.signals.step.steps  # the rank's other figures are there
    metrics.figures = (figures,)
    assert exported_shares(metrics) == {}
