"""The step model: owners that add up to the step, sync idle by the no-sync counterfactual, NVML standing in."""

from __future__ import annotations

import math

import pytest

from gpumon.jobs.host_profile import HostProfile, window_profile
from gpumon.jobs.step_model import (
    BY_NVML,
    BY_SAMPLER,
    CPU,
    DATA,
    GPU_BUSY,
    LAUNCH,
    OWNERS,
    SYNC_IDLE,
    SYNC_WAIT,
    step_model,
)
from gpumon.protocol import activity


def profile(
    activities: dict[str, list[int]], lines: list[dict[str, object]] | None = None, t: float = 10.0
) -> HostProfile:
    host = {
        "hz": 20,
        "samples": sum(sum(c) for c in activities.values()),
        "gpu_state": None,
        "activities": activities,
        "lines": lines or [],
    }
    parsed = HostProfile.from_state(host, t)
    assert parsed is not None
    return parsed


def assert_adds_up(shares: dict[str, float]) -> None:
    assert set(shares) == set(OWNERS)
    assert math.isclose(sum(shares.values()), 1.0, abs_tol=1e-9)
    assert all(share >= 0 for share in shares.values())


def test_main_thread_preprocessing_is_cpu_with_its_line() -> None:
    # A job seen on an H100: 99% of the step in the main thread's Python, the GPU idle at 0.2% GPU-Util.
    model = step_model(
        profile(
            {activity.CPU: [396, 0, 0], activity.FORWARD: [2, 1, 0], activity.DATA_WAIT: [1, 0, 0]},
            [{"file": "/job/train.py", "line": 42, "function": "blur", "activity": "cpu", "counts": [380, 0, 0]}],
        )
    )
    assert model is not None and model.busy_from == BY_SAMPLER
    assert_adds_up(dict(model.shares))
    assert model.shares[CPU] == pytest.approx(396 / 400)
    assert model.shares[GPU_BUSY] == pytest.approx(1 / 400)
    assert max(model.shares, key=lambda owner: model.shares[owner]) == CPU
    assert model.lines[0].where == "train.py:42 (blur)" and model.lines[0].idle_share == pytest.approx(380 / 400)


def test_sync_idle_is_what_removing_the_syncs_gives_back() -> None:
    # GPU-bound with a sync every step: busy 76%, the host waits in syncs 60% of the step; after each sync the
    # GPU idles while the host launches the next step (samples in forward/backward). Without syncs the step would
    # take max(40%, 76%) = 76%: the whole 24% of idle is the syncs' cost, none of it launch's.
    model = step_model(
        profile(
            {
                activity.SYNC: [0, 240, 0],
                activity.FORWARD: [96, 64, 0],
                activity.CPU: [0, 0, 0],
                activity.BACKWARD: [0, 0, 0],
                activity.OPTIMIZER: [0, 0, 0],
                activity.DATA_WAIT: [0, 0, 0],
                activity.OTHER: [0, 0, 0],
                activity.H2D: [0, 0, 0],
                activity.COMM: [0, 0, 0],
                "not an activity": [5, 5, 5],
            }
        )
    )
    assert model is not None
    assert_adds_up(dict(model.shares))
    assert model.shares[GPU_BUSY] == pytest.approx(0.76)
    assert model.sync_wait == pytest.approx(0.6)
    assert model.shares[SYNC_IDLE] == pytest.approx(0.24)
    assert model.shares[LAUNCH] == pytest.approx(0.0)


def test_a_cpu_bound_job_with_a_sync_keeps_most_idle_on_its_code() -> None:
    # Host-bound: busy 10%, syncs 5% of the step: without them the step is 95% of what it is; 5% is the syncs'.
    model = step_model(profile({activity.SYNC: [0, 20, 0], activity.CPU: [340, 20, 0], activity.DATA_WAIT: [20, 0, 0]}))
    assert model is not None
    assert_adds_up(dict(model.shares))
    assert model.shares[SYNC_IDLE] == pytest.approx(0.05)
    assert model.shares[CPU] + model.shares[DATA] == pytest.approx(0.85)
    assert model.shares[CPU] == pytest.approx(0.85 * 340 / 360)


def test_the_budget_s_measured_sync_wait_wins_over_the_sampled_one() -> None:
    counts = {activity.CPU: [50, 300, 0], activity.FORWARD: [50, 0, 0]}
    assert step_model(profile(counts)).shares[SYNC_IDLE] == 0.0  # type: ignore[union-attr]
    # `if loss < best:` waits in C++: the sampler sees the job's line, the budget's __bool__ wrapper times it.
    model = step_model(profile(counts), sync_wait=0.5)
    assert model is not None and model.shares[SYNC_IDLE] == pytest.approx(0.25)
    assert_adds_up(dict(model.shares))


def test_gpu_util_stands_in_where_the_stream_was_not_read() -> None:
    counts = {activity.CPU: [0, 0, 300], activity.SYNC: [0, 0, 100]}
    assert step_model(profile(counts)) is None  # nothing says how busy the GPU was
    model = step_model(profile(counts), nvml_busy=0.2)
    assert model is not None and model.busy_from == BY_NVML
    assert_adds_up(dict(model.shares))
    assert model.shares[GPU_BUSY] == pytest.approx(0.2)
    # host waits 25% in syncs -> host free 75%, max(75%, 20%): 25% of idle is the syncs', the rest the code's.
    assert model.shares[SYNC_IDLE] == pytest.approx(0.25)
    assert model.shares[CPU] == pytest.approx(0.55)
    assert model.shares[SYNC_WAIT] == 0.0


def test_too_few_samples_make_no_model() -> None:
    assert step_model(profile({activity.CPU: [10, 0, 0]})) is None
    assert step_model(None) is None


def test_windows_difference_cumulative_counts_and_survive_a_restart() -> None:
    line = {"file": "/j/t.py", "line": 3, "function": "f", "activity": "cpu"}
    first = profile({activity.CPU: [10, 0, 0]}, [{**line, "counts": [10, 0, 0]}], t=1.0)
    second = profile({activity.CPU: [30, 5, 0], activity.DATA_WAIT: [4, 0, 0]}, [{**line, "counts": [25, 5, 0]}], t=2.0)
    window = window_profile([first, second], start=1.5, end=2.5)
    assert window is not None and window.samples == 29
    assert window.activities == {activity.CPU: (20, 5, 0), activity.DATA_WAIT: (4, 0, 0)}
    assert [(line.idle, line.total) for line in window.lines] == [(15, 20)]
    restarted = profile({activity.CPU: [3, 0, 0]}, t=3.0)  # a new hook (counts from zero): all of its counts
    assert restarted.since(second).samples == 3
    assert window_profile([first, second], start=0.0, end=0.5) is None


def test_hostile_host_objects_parse_to_bounded_records() -> None:
    assert HostProfile.from_state("nope", 1.0) is None
    parsed = HostProfile.from_state(
        {
            "samples": -5,
            "hz": float("nan"),
            "activities": {"cpu": [1, "x", 2], "data_wait": [1, 2]},
            "lines": [{"file": "a" * 10_000, "line": True, "counts": [1, 2, 3], "activity": "evil"}] * 500,
        },
        1.0,
    )
    assert parsed is not None and parsed.samples == 0 and parsed.hz == 0.0
    assert parsed.activities == {"cpu": (1, 0, 2), "data_wait": (0, 0, 0)}
    assert len(parsed.lines) == 64 and len(parsed.lines[0].file) == 500 and parsed.lines[0].activity == "other"


def test_gpu_util_is_busy_and_the_idle_samples_split_the_rest() -> None:
    # The H200 launch-heavy loop: the stream read 37% busy, GPU-Util 72%. GPU-Util wins; the stream's idle samples
    # (forward 30, cpu 10) split the 28% that is idle.
    counts = {activity.FORWARD: [30, 20, 0], activity.CPU: [10, 5, 0]}
    model = step_model(profile(counts), nvml_busy=0.72)
    assert model is not None and model.busy_from == BY_NVML
    assert_adds_up(dict(model.shares))
    assert model.shares[LAUNCH] == pytest.approx(0.28 * 30 / 40)
    assert model.shares[CPU] == pytest.approx(0.28 * 10 / 40)


def test_exposed_communication_comes_out_of_gpu_busy() -> None:
    # The training stream waits in collectives 30% of the timed steps: GPU-Util counts NCCL's kernels (and the
    # stream's wait reads busy), so that share moves from GPU busy to communication.
    model = step_model(profile({activity.BACKWARD: [10, 90, 0]}), nvml_busy=0.9, comm_wait=0.3)
    assert model is not None
    assert_adds_up(dict(model.shares))
    assert model.shares[GPU_BUSY] == pytest.approx(0.6)
    assert model.shares["comm"] == pytest.approx(0.3)
    assert model.shares[LAUNCH] == pytest.approx(0.1)
