"""The step model's owners measured by the hook itself: the collector, the allocator, device->host copies and a
CPU-side optimizer, and the idle seen inside a blocking copy."""

from __future__ import annotations

import pytest

from gpumon.jobs.host_profile import HostProfile
from gpumon.jobs.step_model import (
    ALLOC,
    CPU,
    CPU_OPTIMIZER,
    D2H,
    D2H_WAIT_RATE,
    DATA,
    GC,
    GPU_BUSY,
    H2D,
    HOST_OPTIMIZER_CPU,
    HOST_OPTIMIZER_SHARE,
    LAUNCH,
    OTHER,
    OWNERS,
    SYNC_IDLE,
    MeasuredHostTime,
    estimate_step_model,
    optimizer_on_host,
    step_model,
)
from gpumon.protocol import activity


def profile(activities: dict[str, list[int]]) -> HostProfile:
    host = {"hz": 20, "samples": sum(sum(c) for c in activities.values()), "gpu_state": None, "activities": activities}
    parsed = HostProfile.from_state(host, 10.0)
    assert parsed is not None
    return parsed


def adds_up(shares: dict[str, float]) -> None:
    assert set(shares) == set(OWNERS)
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-9)
    assert all(share >= -1e-12 for share in shares.values())


LAUNCHING = profile({activity.FORWARD: [60, 20, 0], activity.BACKWARD: [20, 0, 0]})
"""The host in torch's launches 100 samples, the stream idle at 80 of them."""


def test_measured_idle_caps_gpu_util_busy() -> None:
    """GPU-Util reads 95%, but the hook saw the stream empty during empty_cache's frees for 40% of the time: the GPU
    idled then whatever NVML says, and the frees own that idle."""
    model = step_model(LAUNCHING, nvml_busy=0.95, measured=MeasuredHostTime(alloc=0.5, alloc_idle=0.4))
    assert model is not None
    adds_up(dict(model.shares))
    assert model.shares[GPU_BUSY] == pytest.approx(0.6)
    assert model.shares[ALLOC] >= 0.4


def test_without_measured_idle_gpu_util_stands() -> None:
    model = step_model(LAUNCHING, nvml_busy=0.95)
    assert model is not None
    assert model.shares[GPU_BUSY] == pytest.approx(0.95)
    assert model.shares[ALLOC] == 0.0


def test_collector_passes_take_their_time_from_the_host_side_owners() -> None:
    """A launch-bound job (GPU busy 20%) whose collector runs 30% of the time: the samples after each pass landed on
    launches, so GC takes its 30% from them."""
    model = step_model(LAUNCHING, nvml_busy=0.2, measured=MeasuredHostTime(gc=0.3))
    assert model is not None
    adds_up(dict(model.shares))
    assert model.shares[GC] == pytest.approx(0.3)
    assert model.shares[LAUNCH] == pytest.approx(0.5)


def test_collector_time_on_a_busy_gpu_owns_no_more_than_the_idle() -> None:
    model = step_model(LAUNCHING, nvml_busy=0.9, measured=MeasuredHostTime(gc=0.3))
    assert model is not None
    assert model.shares[GC] <= 0.1 + 1e-9


def test_a_blocking_device_to_host_copy_owns_its_measured_idle() -> None:
    syncing = profile({activity.SYNC: [30, 10, 0], activity.FORWARD: [20, 40, 0]})
    model = step_model(syncing, nvml_busy=0.5, measured=MeasuredHostTime(d2h=0.35, d2h_idle=0.25))
    assert model is not None
    adds_up(dict(model.shares))
    assert model.shares[D2H] >= 0.25
    assert model.shares[D2H] > model.shares[SYNC_IDLE]


def test_idle_seen_inside_a_host_to_device_copy_is_the_copy_s_before_the_drain() -> None:
    """A pageable copy waits for the queue, then copies with the GPU idle: the budget times all of it as a sync wait
    (72% of the step), but the idle samples inside the copy are the copy's."""
    copying = profile({activity.H2D: [35, 30, 0], activity.FORWARD: [4, 31, 0]})
    model = step_model(copying, nvml_busy=0.61, sync_wait=0.72)
    assert model is not None
    adds_up(dict(model.shares))
    assert model.shares[H2D] > model.shares[SYNC_IDLE]
    inside, drain = 0.39 * 35 / 39, 0.39 * 4 / 39  # the drain shared by the waits: the copy's 30% of the syncs' 72%
    assert model.shares[H2D] == pytest.approx(inside + drain * 0.30 / 0.72, abs=0.005)


def test_the_drain_after_a_blocking_copy_s_wait_is_the_copy_s() -> None:
    """A pageable copy every step and no other sync: the host waits in the copy for the queued work (the budget times
    that as a sync wait, 40%), the GPU then idles while the copy runs and while the host queues the next step. The
    idle after the wait is the copy's, as a sync's is the sync's: removing the copy gives it back, not removing a
    sync (there is none to remove)."""
    copying = profile({activity.H2D: [10, 40, 0], activity.FORWARD: [30, 20, 0]})
    model = step_model(copying, nvml_busy=0.6, sync_wait=0.40)
    assert model is not None
    adds_up(dict(model.shares))
    assert model.sync_wait == pytest.approx(0.0)
    assert model.shares[SYNC_IDLE] == pytest.approx(0.0)
    assert model.shares[H2D] == pytest.approx(0.4)  # 10% inside the copy, the rest its drain (sync_cost(0.4, 0.6))
    assert model.shares[LAUNCH] == pytest.approx(0.0)


def test_a_copy_s_wait_the_budget_timed_owns_the_drain_where_the_stream_s_state_is_unknown() -> None:
    """A CUDA graph capture stops the sampler's stream queries, so no sample says the host waited in a copy; the
    budget's h2d_wait (the pageable copies that found work queued, held-out 1177 and 1166) still gives the drain after
    that wait to the copy, not to a sync."""
    unknown = profile({activity.H2D: [0, 0, 30], activity.FORWARD: [0, 0, 70]})
    blind = step_model(unknown, nvml_busy=0.7, sync_wait=0.36)
    told = step_model(unknown, nvml_busy=0.7, sync_wait=0.36, measured=MeasuredHostTime(h2d_wait=0.36))
    assert blind is not None and told is not None
    adds_up(dict(told.shares))
    assert blind.shares[SYNC_IDLE] > 0.2 and blind.shares[H2D] < 0.1
    assert told.shares[SYNC_IDLE] == pytest.approx(0.0) and told.sync_wait == pytest.approx(0.0)
    assert told.shares[H2D] == pytest.approx(0.3)  # sync_cost(0.36, 0.7): all of the GPU's idle


def test_the_optimizer_s_samples_are_cpu_math_when_its_parameters_live_on_the_cpu() -> None:
    stepping = profile({activity.OPTIMIZER: [50, 0, 0], activity.CPU: [10, 0, 0], activity.FORWARD: [0, 40, 0]})
    on_gpu = step_model(stepping, nvml_busy=0.4)
    on_cpu = step_model(stepping, nvml_busy=0.4, measured=MeasuredHostTime(optimizer_on_cpu=True))
    assert on_gpu is not None and on_cpu is not None
    assert on_gpu.shares[CPU_OPTIMIZER] == 0.0 and on_gpu.shares[LAUNCH] == pytest.approx(0.5)
    assert on_cpu.shares[CPU_OPTIMIZER] == pytest.approx(0.5) and on_cpu.shares[LAUNCH] == 0.0
    assert on_cpu.shares[CPU] == pytest.approx(0.1)


def test_py_spy_s_torch_frames_own_the_idle_no_full_queue_can_explain() -> None:
    """Held-out seed 1063 (a transformer at GPU-Util 29%, SM activity 19%; launches truth 74%): py-spy saw the main
    thread in torch's forward, backward and optimizer 96% of the time. A thread blocked behind a full queue keeps
    the GPU busy, so at most the busy 29% of that time can be blocked: the GPU idled through the other 67 points,
    whatever SM activity over GPU-Util (0.66) says of how full the kernels leave the SMs."""
    fractions = {"forward": 0.3015, "backward": 0.5147, "optimizer": 0.1397, "user_code": 0.0368, "cuda_sync": 0.0074}
    model = estimate_step_model(fractions, busy=0.29, samples=136, kernel_fill=19 / 29)
    assert model.shares[LAUNCH] == pytest.approx(0.9559 - 0.29, abs=0.005)
    assert model.shares[OTHER] < 0.05
    # Busy 90% of the time, at least the 5.6 points beyond it; in torch less than the GPU is busy, all of that time
    # may be blocked behind the queue, and the kernels' fill decides as before.
    busy = estimate_step_model(fractions, busy=0.9, samples=136, kernel_fill=0.9)
    assert busy.shares[LAUNCH] == pytest.approx(0.9559 - 0.9, abs=0.003)
    # Waiting half the time for the DataLoader at GPU busy 90%: the idle after the queued work drained is the wait's.
    loader = estimate_step_model({"data_wait": 0.5, "forward": 0.3, "user_code": 0.2}, 0.9, 100, kernel_fill=0.9)
    assert loader.shares[DATA] == pytest.approx(0.1) and loader.shares[LAUNCH] == pytest.approx(0.0)


def test_py_spy_s_host_to_device_copies_own_the_drain_after_them_as_syncs_do() -> None:
    """py-spy in a copy 36% of the time, in a sync 1%, GPU busy 73%: the copy blocks, waits for the queue and then
    copies; without it the host would run ahead, so the idle it leaves (sync_cost) is the copy's, shared with the sync
    by their time."""
    fractions = {"h2d": 0.36, "cuda_sync": 0.01, "forward": 0.3, "backward": 0.33}
    model = estimate_step_model(fractions, 0.73, 200)
    adds_up(dict(model.shares))
    drain = 1.0 - max(1.0 - 0.37, 0.73)
    assert model.shares[H2D] == pytest.approx(drain * 0.36 / 0.37)
    assert model.shares[SYNC_IDLE] == pytest.approx(drain * 0.01 / 0.37)
    assert model.shares[LAUNCH] == pytest.approx(0.0)


def test_py_spy_s_waits_are_copies_back_where_the_gpu_sends_the_host_half_a_gigabyte_a_second() -> None:
    fractions = {"cuda_sync": 0.86, "forward": 0.03, "backward": 0.08, "user_code": 0.03}
    scalar = estimate_step_model(fractions, busy=0.1, samples=120, kernel_fill=0.5, d2h_rate=13e6)
    copies = estimate_step_model(fractions, busy=0.1, samples=120, kernel_fill=0.5, d2h_rate=D2H_WAIT_RATE)
    assert scalar.shares[SYNC_IDLE] > 0.5 and scalar.shares[D2H] == 0.0
    assert copies.shares[D2H] == pytest.approx(scalar.shares[SYNC_IDLE]) and copies.shares[SYNC_IDLE] == 0.0
    assert sum(copies.shares.values()) == pytest.approx(1.0)


def test_py_spy_s_optimizer_frames_are_the_host_optimizer_only_beside_torch_s_cpu_threads() -> None:
    fractions = {"optimizer": 0.72, "forward": 0.01, "backward": 0.01, "user_code": 0.21, "cuda_sync": 0.01}
    one_core = estimate_step_model(fractions, busy=0.18, samples=136, kernel_fill=0.3, main_cpu=105.0)
    threads = estimate_step_model(fractions, busy=0.18, samples=136, kernel_fill=0.3, main_cpu=313.0)
    assert one_core.shares[CPU_OPTIMIZER] == 0.0 and one_core.shares[LAUNCH] > 0.4
    assert threads.shares[CPU_OPTIMIZER] > 0.4 and threads.shares[LAUNCH] < 0.05
    assert not optimizer_on_host({"optimizer": HOST_OPTIMIZER_SHARE - 0.01}, HOST_OPTIMIZER_CPU + 100)
    assert optimizer_on_host({"optimizer": HOST_OPTIMIZER_SHARE}, HOST_OPTIMIZER_CPU)


def test_each_idle_line_says_how_often_the_gpu_had_work_queued_there() -> None:
    """A line that launches many tiny ops keeps a little work queued; host-only work lets the queue drain."""
    host = {
        "hz": 20,
        "samples": 100,
        "gpu_state": None,
        "activities": {activity.CPU: [70, 30, 0]},
        "lines": [
            {"file": "/job/train.py", "line": 40, "function": "step", "activity": "cpu", "counts": [30, 20, 0]},
            {"file": "/job/train.py", "line": 52, "function": "log", "activity": "cpu", "counts": [40, 10, 0]},
        ],
    }
    parsed = HostProfile.from_state(host, 10.0)
    assert parsed is not None
    model = step_model(parsed, nvml_busy=None)
    assert model is not None
    busy = {line.where: line.busy_fraction for line in model.lines}
    assert busy == {"train.py:40 (step)": pytest.approx(0.4), "train.py:52 (log)": pytest.approx(0.2)}
    assert model.to_dict()["lines"][0]["busy_fraction"] == pytest.approx(0.2)  # the most idle line first
