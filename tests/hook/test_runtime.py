"""Step detection, GPU timing, knobs and the diagnosis window of HookRuntime, driven signal by signal."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import warnings
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from fake_cuda import FakeCuda, fake_torch
from torch.utils.data import DataLoader

from gpumon import protocol
from gpumon.hook import gpu_timer, info
from gpumon.hook import runtime as runtime_module
from gpumon.hook import schedule as schedule_module
from gpumon.hook.knob_state import apply_dataloader_knobs
from gpumon.hook.runtime import (
    LEAD_SWITCH_AFTER,
    R_DATA,
    R_GPU,
    R_SAMPLES,
    R_SEQ,
    R_SOURCE,
    R_SYNCS,
    R_WALL,
    HookRuntime,
)
from gpumon.hook.schedule import CUDA_PROBE_EVERY


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def fetch(
    rt: HookRuntime, clock: Clock, wait: float, batch: Any = None, iterator: Any = None, plain: bool = True
) -> None:
    """A batch through the hook's DataLoader __next__ wrapper, the fetch taking `wait`; without `plain`, always on the
    wrapper's general path."""
    batch = torch.zeros(8, 2) if batch is None else batch

    def original_next(_iterator: Any) -> Any:
        clock.advance(wait)
        return batch

    if not plain:
        rt.plain_fetch = False
    rt.dataloader_next(original_next)(iterator if iterator is not None else object())


def stop_iteration(rt: HookRuntime) -> None:
    """The DataLoader's last __next__ call, the one raising StopIteration, through the hook's wrapper."""

    def original_next(_iterator: Any) -> Any:
        raise StopIteration

    with pytest.raises(StopIteration):
        rt.dataloader_next(original_next)(object())


def optimizer_step(rt: HookRuntime, optimizer: Any) -> None:
    """What torch calls after an optimizer step: the hook's global post-hook."""
    rt.optimizer_step_hook(optimizer, (), {})


class Opt:
    param_groups: ClassVar[list[dict[str, Any]]] = [{"params": [torch.zeros(1)]}]


def sources(rt: HookRuntime) -> list[str]:
    return [r[R_SOURCE] for r in rt.records]


def test_optimizer_steps_mark_steps_and_fallbacks_stay_quiet(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    clock.advance(5.0)  # model setup is not part of the first step
    opt = Opt()
    for _ in range(3):
        fetch(rt, clock, 0.010)
        clock.advance(0.020)
        rt.on_backward()
        clock.advance(0.030)
        rt.on_optimizer_step(opt)
    stop_iteration(rt)
    assert [r[R_SEQ] for r in rt.records] == [1, 2, 3]
    assert sources(rt) == [protocol.SOURCE_OPTIMIZER] * 3
    assert [round(r[R_WALL], 6) for r in rt.records] == [0.06] * 3
    assert [round(r[R_DATA], 6) for r in rt.records] == [0.01] * 3
    assert [r[R_SAMPLES] for r in rt.records] == [8] * 3
    assert rt.records[0][R_SYNCS] is None and rt.records[0][R_GPU] is None


def test_gradient_accumulation_sums_the_micro_batches(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    opt = Opt()
    for _ in range(2):
        for _ in range(4):
            fetch(rt, clock, 0.001, batch=torch.zeros(2, 3))
            rt.on_backward()
        rt.on_optimizer_step(opt)
    # The first optimizer step comes after three fallback steps (no optimizer seen yet): then only optimizer.
    assert sources(rt)[-2:] == [protocol.SOURCE_OPTIMIZER] * 2
    assert rt.records[-1][R_SAMPLES] == 8


def test_one_lead_optimizer_marks_steps(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    generator, discriminator = Opt(), Opt()
    for _ in range(5):
        fetch(rt, clock, 0.001)
        rt.on_optimizer_step(discriminator)
        rt.on_optimizer_step(generator)
    assert rt.seq == 5
    # A lead that stops stepping (e.g. a warm-up optimizer) is replaced after LEAD_SWITCH_AFTER others.
    for _ in range(LEAD_SWITCH_AFTER - 2):  # the generator has stepped once since the lead's last step
        rt.on_optimizer_step(generator)
    assert rt.seq == 5
    for _ in range(3):
        rt.on_optimizer_step(generator)
    assert rt.seq == 8


def test_a_warm_up_optimizer_gone_hands_the_lead_over_at_once(clock: Clock) -> None:
    # A graph capture's own optimizer stepped 4 times, then dropped: the job's optimizer closes steps from its first.
    rt = HookRuntime(torch, clock=clock)
    warm_up = Opt()
    for _ in range(4):
        clock.advance(0.01)
        rt.on_optimizer_step(warm_up)
    del warm_up
    gc.collect()
    real = Opt()
    for _ in range(3):
        clock.advance(0.3)
        rt.on_optimizer_step(real)
    assert rt.seq == 7
    assert [round(r[R_WALL], 6) for r in list(rt.records)[-3:]] == [0.3] * 3


def test_a_silent_lead_is_replaced_after_two_steps_of_another(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    warm_up, real = Opt(), Opt()  # the warm-up one stays referenced
    for _ in range(4):
        clock.advance(0.01)
        rt.on_optimizer_step(warm_up)
    clock.advance(0.5)
    rt.on_optimizer_step(real)
    clock.advance(0.4)
    rt.on_optimizer_step(real)
    assert rt.seq == 4  # silent 0.9 s: still the lead
    clock.advance(0.3)
    rt.on_optimizer_step(real)
    assert rt.seq == 5  # silent 1.2 s, and the other's third step
    clock.advance(0.3)
    rt.on_optimizer_step(real)
    assert rt.seq == 6
    assert warm_up is not None


def test_manual_sgd_with_a_dataloader(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    for _ in range(4):
        fetch(rt, clock, 0.002)
        rt.on_backward()
        clock.advance(0.005)
    stop_iteration(rt)
    assert rt.seq == 4
    assert sources(rt) == [protocol.SOURCE_BACKWARD] * 4
    assert [round(r[R_WALL], 6) for r in rt.records] == [0.007] * 4


def test_manual_sgd_without_a_dataloader(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    for _ in range(5):
        clock.advance(0.004)
        rt.on_backward()
    assert rt.seq == 4  # each backward after the first closes the step before it
    assert [round(r[R_WALL], 6) for r in rt.records] == [0.004] * 4
    assert all(r[R_SAMPLES] is None for r in rt.records)


def test_inference_steps_at_each_batch(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    for _ in range(3):
        fetch(rt, clock, 0.001, batch={"ids": torch.zeros(4, 7)})
        clock.advance(0.002)
    stop_iteration(rt)
    assert sources(rt) == [protocol.SOURCE_DATALOADER] * 3
    assert [r[R_SAMPLES] for r in rt.records] == [4] * 3


def test_a_failure_counting_a_batch_leaves_the_steps_alone(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(batch: Any) -> int:
        raise RuntimeError("injected failure inside the hook")

    monkeypatch.setattr(runtime_module, "count_samples", broken)
    rt = HookRuntime(torch, clock=clock)
    for _ in range(3):
        fetch(rt, clock, 0.001, batch={"ids": torch.zeros(4, 7)})
        clock.advance(0.002)
    stop_iteration(rt)
    assert sources(rt) == [protocol.SOURCE_DATALOADER] * 3 and rt.errors == 3
    assert all(r[R_SAMPLES] is None for r in rt.records)


def test_manual_steps_win_over_every_other_signal(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    opt = Opt()
    for _ in range(3):
        fetch(rt, clock, 0.001)
        rt.on_backward()
        rt.on_optimizer_step(opt) if rt.seq else None
        rt.on_manual_step(None)
    rt.on_manual_step(32)
    assert sources(rt)[-3:] == [protocol.SOURCE_MANUAL] * 3
    assert rt.records[-2][R_SAMPLES] == 8 and rt.records[-1][R_SAMPLES] == 32


def test_dataloader_settings_and_worker_accounting(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    loader = DataLoader(list(range(10)), batch_size=4, drop_last=True)
    iterator = iter(loader)
    rt.on_loader_iter_end(loader, iterator)
    fetch(rt, clock, 0.25, iterator=iterator)
    fetch(rt, clock, 0.25, iterator=iterator)
    (entry,) = rt.loaders.values()
    assert (entry.batch_size, entry.num_workers, entry.drop_last, entry.dataset) == (4, 0, True, "list")
    assert entry.worker_pids == [] and entry.prefetch_factor is None
    assert entry.batches == 2 and round(entry.wait_s, 6) == 0.5
    (listed,) = info.dataloader_infos(rt)
    assert listed["wait_ms"] == 500.0 and listed["batches"] == 2


def test_dataloader_knobs_apply_to_the_next_iterator() -> None:
    loader = DataLoader(list(range(10)), batch_size=2)
    loader._iterator = object()  # as if a persistent iterator existed
    apply_dataloader_knobs(loader, {"num_workers": 3, "persistent_workers": True, "pin_memory": False})
    assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (3, 2, True)
    assert loader._iterator is None
    apply_dataloader_knobs(loader, {"num_workers": 0})
    assert loader.num_workers == 0
    assert [batch.tolist() for batch in loader][:2] == [[0, 1], [2, 3]]


def test_control_knobs_apply_at_the_next_step(clock: Clock) -> None:
    fake = fake_torch()
    fake.cuda.initialized = False
    rt = HookRuntime(fake, clock=clock)
    rt.control.append(("knobs", {"cudnn_benchmark": True, "num_workers": 3}, 1))
    assert fake.backends.cudnn.benchmark is False
    rt.on_manual_step(None)
    assert fake.backends.cudnn.benchmark is True
    assert rt.knobs.dataloader == {"num_workers": 3}
    assert rt.knobs.applied == {"cudnn_benchmark": True, "num_workers": 3}


def test_env_knobs_are_reapplied_at_the_first_step(clock: Clock) -> None:
    fake = fake_torch()
    fake.cuda.initialized = False
    rt = HookRuntime(fake, clock=clock)
    rt.set_env_knobs('{"tf32": true, "float32_matmul_precision": "high", "prefetch_factor": 4}')
    assert fake.backends.cuda.matmul.allow_tf32 is True and fake.get_float32_matmul_precision() == "high"
    fake.backends.cuda.matmul.allow_tf32 = False  # the script sets its own flags while building the model
    rt.on_manual_step(None)
    assert fake.backends.cuda.matmul.allow_tf32 is True
    assert rt.knobs.dataloader == {"prefetch_factor": 4}
    rt.set_env_knobs("{not json")
    rt.set_env_knobs('{"warp_speed": 9}')
    assert len(rt.knobs.errors) == 2 and "warp_speed" in rt.knobs.errors[1]


def test_env_knobs_the_hook_does_not_know_are_reported_and_the_rest_still_apply(clock: Clock) -> None:
    """A trial run passes the hook's knobs and the script's own (amp_bf16) in one GPUMON_KNOBS."""
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    rt.set_env_knobs('{"amp_bf16": true, "num_workers": 2, "cudnn_benchmark": true, "pin_memory": "yes"}')
    assert rt.knobs.applied == {"num_workers": 2, "cudnn_benchmark": True}
    assert fake.backends.cudnn.benchmark is True
    assert rt.knobs.ignored == ["amp_bf16"]
    assert any("amp_bf16" in e and "left to the script" in e for e in rt.knobs.errors)
    assert any("pin_memory" in e for e in rt.knobs.errors)
    assert info.state(rt, clients=0, installed_at=0.0)["knobs"]["ignored"] == ["amp_bf16"]


# -- GPU timing on a fake GPU -------------------------------------------------------------------


OPT = Opt()


def gpu_runtime(clock: Clock, every: int = 1) -> tuple[HookRuntime, FakeCuda]:
    """A runtime whose GPU timing has just started (after CUDA_PROBE_EVERY steps), its records cleared;
    it times one step in `every` (every step by default)."""
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    rt.gpu_every = every
    for _ in range(CUDA_PROBE_EVERY):
        rt.on_optimizer_step(OPT)
    assert rt.gpu is not None, "GPU timing starts once CUDA is initialized"
    rt.records.clear()
    return rt, fake.cuda


def timings(rt: HookRuntime) -> list[tuple[int, float | None]]:
    """(step number since GPU timing started, gpu_ms) of the records."""
    return [(r[R_SEQ] - CUDA_PROBE_EVERY, r[R_GPU]) for r in rt.records]


def train_step(rt: HookRuntime, cuda: FakeCuda, gpu_start: float, gpu_end: float, opt: Any) -> None:
    cuda.gpu_time_ms = gpu_start
    fetch(rt, rt.clock, 0.001)  # type: ignore[arg-type]
    cuda.gpu_time_ms = gpu_end
    optimizer_step(rt, opt)


def test_gpu_time_is_read_only_once_the_events_completed(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock)
    opt = OPT
    train_step(rt, cuda, 0.0, 7.0, opt)
    train_step(rt, cuda, 9.0, 12.5, opt)
    assert len(rt.records) == 0, "records wait for their events"
    cuda.complete_all()
    train_step(rt, cuda, 20.0, 21.0, opt)
    assert timings(rt) == [(1, 7.0), (2, 3.5)]
    cuda.complete_all()
    rt.flush()
    assert timings(rt)[-1] == (3, 1.0)


def test_gpu_events_are_pooled(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock)
    opt = OPT
    for i in range(200):
        train_step(rt, cuda, i * 10.0, i * 10.0 + 4.0, opt)
        cuda.complete_all()
    assert len(rt.records) == 199 and {r[R_GPU] for r in rt.records} == {4.0}
    assert cuda.events_created <= 6


def test_steps_without_a_fetch_start_at_the_previous_end(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock)
    for end in (5.0, 8.0, 15.0, 16.0):
        cuda.gpu_time_ms = end
        rt.on_manual_step(None)
        cuda.complete_all()
    rt.on_manual_step(None)
    # The first step starts at the boundary where timing began (GPU clock 0 there).
    assert [r[R_GPU] for r in rt.records] == [5.0, 3.0, 7.0, 1.0]
    assert cuda.recorded == 1 + 5  # one event where timing began, then one end event per step


def test_fast_steps_are_sampled_slow_ones_all_timed(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock, every=4)
    for i in range(16):  # fast steps 9..24: steps 12, 16, 20, 24 are timed, with two events each
        train_step(rt, cuda, i * 10.0, i * 10.0 + 2.0, OPT)
        cuda.complete_all()
    assert [r[R_GPU] is not None for r in rt.records] == [False, False, False, True] * 3 + [False] * 3
    assert cuda.recorded == 8
    rt.records.clear()
    for i in range(8):  # slow steps 25..32 (50 ms): each step after a slow one is timed
        clock.advance(0.05)
        train_step(rt, cuda, 500.0 + i * 10.0, 503.0 + i * 10.0, OPT)
        cuda.complete_all()
    # step 24 (timed, fast) leaves now; 25 followed a fast step; 26..31 are timed; 32 still queued
    assert [r[R_GPU] for r in rt.records] == [2.0, None] + [3.0] * 6


def timed_steps(rt: HookRuntime, cuda: FakeCuda, steps: int, seconds: float) -> list[int]:
    """Train `steps` steps of `seconds` each (the fetch half of it), the fake GPU keeping up; the numbers of the steps
    that were GPU-timed."""
    rt.records.clear()
    for i in range(steps):
        train_step(rt, cuda, i * 10.0, i * 10.0 + 1.0, OPT)
        clock = rt.clock
        assert isinstance(clock, Clock)
        clock.advance(seconds - 0.001)
        cuda.complete_all()
    return [r[R_SEQ] for r in rt.records if r[R_GPU] is not None]


def test_by_default_timed_steps_are_a_tenth_of_a_second_apart(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast steps are timed about every GPU_TIMING_MIN_GAP_S, not one in 8; steps slower than gap / 8 one in 8."""
    monkeypatch.delenv(protocol.GPU_TIMING_ENV, raising=False)
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    rt.budget_every = 0  # only GPU timing's own schedule
    for _ in range(CUDA_PROBE_EVERY):
        optimizer_step(rt, OPT)
    assert rt.gpu is not None and rt.gpu_min_gap_s == schedule_module.GPU_TIMING_MIN_GAP_S
    fast = timed_steps(rt, fake.cuda, 1000, 0.002)  # 2 ms steps: one in 50
    gaps = [b - a for a, b in itertools.pairwise(fast)]
    assert 18 <= len(fast) <= 21 and gaps and all(gap in (50, 51) for gap in gaps), fast  # a float clock
    slower = timed_steps(rt, fake.cuda, 200, 0.015)  # 15 ms steps: 0.1 s is 7 of them, under GPU_TIMING_EVERY
    gaps = [b - a for a, b in itertools.pairwise(slower)]
    assert gaps and all(gap == schedule_module.GPU_TIMING_EVERY for gap in gaps[1:]), slower
    assert len(rt.records) <= 200 and fake.cuda.recorded <= 2 * (len(fast) + len(slower)) + 2


def test_an_explicit_gpu_timing_n_times_exactly_one_step_in_n(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(protocol.GPU_TIMING_ENV, "8")
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    rt.budget_every = 0
    for _ in range(CUDA_PROBE_EVERY):
        optimizer_step(rt, OPT)
    assert rt.gpu_min_gap_s == 0
    timed = timed_steps(rt, fake.cuda, 400, 0.002)
    assert timed == [seq for seq in range(CUDA_PROBE_EVERY + 1, CUDA_PROBE_EVERY + 400) if seq % 8 == 0][: len(timed)]
    assert len(timed) >= 400 // 8 - 1


@pytest.mark.parametrize(
    ("cuda_version", "hip_version", "probed"), [("12.8", None, True), (None, "6.3", True), (None, None, False)]
)
def test_cuda_is_probed_unless_torch_was_built_without_it(
    clock: Clock, cuda_version: str | None, hip_version: str | None, probed: bool
) -> None:
    fake = fake_torch()
    fake.version = SimpleNamespace(cuda=cuda_version, hip=hip_version)
    probes = []
    fake.cuda.is_initialized = lambda: probes.append(1) or True
    rt = HookRuntime(fake, clock=clock)
    for _ in range(3 * CUDA_PROBE_EVERY):
        optimizer_step(rt, OPT)
    assert (rt.gpu is not None, len(probes)) == ((True, 1) if probed else (False, 0))


def test_gpu_timing_can_be_turned_off(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(protocol.GPU_TIMING_ENV, "0")
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    for _ in range(3 * CUDA_PROBE_EVERY):
        rt.on_optimizer_step(OPT)
    assert rt.gpu is None and fake.cuda.recorded == 0 and len(rt.records) == 3 * CUDA_PROBE_EVERY
    assert rt.cuda_device == 0  # still known, for the memory readings


def test_graph_capture_steps_are_left_unmeasured_in_order(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock)
    opt = OPT
    train_step(rt, cuda, 0.0, 2.0, opt)
    cuda.capturing = True
    recorded = cuda.recorded
    train_step(rt, cuda, 3.0, 4.0, opt)
    assert cuda.recorded == recorded, "no event may be recorded while a graph is captured"
    cuda.capturing = False
    cuda.complete_all()
    train_step(rt, cuda, 5.0, 9.0, opt)
    cuda.complete_all()
    train_step(rt, cuda, 10.0, 11.0, opt)
    assert timings(rt) == [(1, 2.0), (2, None), (3, 4.0)]


def test_a_gpu_that_never_catches_up_does_not_grow_memory(clock: Clock) -> None:
    rt, cuda = gpu_runtime(clock)
    opt = OPT
    for _ in range(gpu_timer.MAX_PENDING + 50):
        train_step(rt, cuda, 0.0, 1.0, opt)
    assert len(rt.gpu._pending) <= gpu_timer.MAX_PENDING + 1  # type: ignore[union-attr]
    assert len(rt.records) >= 49 and all(r[R_GPU] is None for r in rt.records)


# -- the diagnosis window --------------------------------------------------------------------------


def user_code_syncs(times: int) -> None:
    for _ in range(times):
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)


def test_diagnosis_counts_syncs_per_step_and_restores_everything(clock: Clock) -> None:
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    filters_before = list(warnings.filters)
    showwarning_before = warnings.showwarning
    rt.control.append(("diagnose", 2, "req-1"))
    rt.on_manual_step(None)  # the window opens at this boundary
    assert fake.cuda.sync_debug_mode == 1
    user_code_syncs(2)
    rt.on_manual_step(None)
    user_code_syncs(1)
    with pytest.warns(DeprecationWarning, match="unrelated"):
        warnings.warn("unrelated", DeprecationWarning, stacklevel=1)
    rt.on_manual_step(None)
    with pytest.warns(UserWarning, match="synchronizing"):  # after the window: shown as usual, not counted
        user_code_syncs(5)
    rt.on_manual_step(None)
    assert [r[R_SYNCS] for r in rt.records] == [None, 2, 1, None]
    (result,) = rt.outbox
    assert result["id"] == "req-1" and result["available"] is True
    assert result["syncs_per_step"] == [2, 1] and result["syncs_total"] == 3
    (site,) = result["sites"]
    assert site["file"] == __file__ and site["count"] == 3
    assert fake.cuda.sync_debug_mode == 0
    assert warnings.filters == filters_before and warnings.showwarning is showwarning_before
    assert not rt.diagnosing


def test_diagnosis_leaves_a_job_own_sync_debug_mode_alone(clock: Clock) -> None:
    fake = fake_torch()
    fake.cuda.sync_debug_mode = 2
    rt = HookRuntime(fake, clock=clock)
    rt.control.append(("diagnose", 5, 9))
    rt.on_manual_step(None)
    (result,) = rt.outbox
    assert result["available"] is False and "set torch.cuda sync debug mode itself" in result["reason"]
    assert fake.cuda.sync_debug_mode == 2


def test_a_diagnosis_open_at_exit_is_closed(clock: Clock) -> None:
    fake = fake_torch()
    rt = HookRuntime(fake, clock=clock)
    rt.control.append(("diagnose", 100, None))
    rt.on_manual_step(None)
    user_code_syncs(1)
    rt.on_manual_step(None)
    rt.flush()
    (result,) = rt.outbox
    assert result["steps"] == 1 and result["syncs_total"] == 1
    assert fake.cuda.sync_debug_mode == 0


def _drive(rt: HookRuntime, clock: Clock, steps: int, plain: bool = True) -> int:
    """Steps of about 1 ms (every 37th one 25 ms: slow enough to have the next one GPU-timed) through the patched
    functions' paths (with `plain`, else always the general ones); a fake GPU completes its events by the end of each
    step (its clock at the step's fetch). Returns how many fetches were plain."""
    cuda = rt.torch.cuda
    plain_fetches = 0
    loader, iterator = SimpleNamespace(batch_size=6), object()
    rt.on_loader_iter_end(loader, iterator)
    for i in range(steps):
        if isinstance(cuda, FakeCuda):
            cuda.gpu_time_ms = i * 10.0
        if plain and rt.plain_fetch:
            plain_fetches += 1
            assert not rt.budget.active and (rt.gpu is None or not rt.gpu.timed), "a plain fetch has nothing to do"
        size = 3 + i % 4
        fetch(rt, clock, 0.0002, batch=[torch.zeros(size, 2), torch.zeros(size)], iterator=iterator, plain=plain)
        clock.advance(0.025 if i % 37 == 36 else 0.001 + (i % 7) * 0.0001)
        rt.on_backward()
        if isinstance(cuda, FakeCuda):
            cuda.gpu_time_ms = i * 10.0 + 1.0 + i % 3
            cuda.complete_all()
        if plain:
            optimizer_step(rt, OPT)
        else:
            rt.on_optimizer_step(OPT)
    return plain_fetches


@pytest.mark.parametrize("gpu_every", [4, None], ids=["gpu_every_4", "gpu_timing_gap"])
@pytest.mark.parametrize("make_torch", [lambda: torch, fake_torch], ids=["cpu", "fake_cuda"])
def test_quiet_boundaries_do_what_full_ones_do(
    make_torch: Any, gpu_every: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close_step's quiet path (only the record), the plain fetch and the lead optimizer's plain step give the same
    records, budgets, FLOP count and GPU timing (from each timed step's fetch) as doing every boundary and signal in
    full, over enough steps for budgets, budget candidates within the gap, a FLOP count and CUDA probes; with GPU
    timing one step in 4, and on its default schedule (timed steps a gap apart, and after slow steps)."""
    monkeypatch.delenv(protocol.BUDGET_EVERY_ENV, raising=False)
    monkeypatch.delenv(protocol.GPU_TIMING_ENV, raising=False)
    runs = []
    for full in (False, True):
        clock = Clock()
        rt = HookRuntime(make_torch(), clock=clock)
        if gpu_every is not None:
            rt.gpu_every = gpu_every
        if full:  # every boundary a busy one
            rt.schedule = dataclasses.replace(rt.schedule, quiet=False)
        plain_fetches = _drive(rt, clock, 300, plain=not full)
        assert full or plain_fetches > 150, "most fetches took the plain path"
        rt.flush()
        runs.append(rt)
    quiet, full_rt = runs
    assert [r[:9] for r in quiet.records] == [r[:9] for r in full_rt.records]
    assert [r[R_SAMPLES] for r in quiet.records] == [3 + i % 4 for i in range(300)]
    (quiet_loader,), (full_loader,) = (rt.loaders.values() for rt in runs)
    assert quiet_loader.batches == full_loader.batches == 300
    assert quiet_loader.wait_s == full_loader.wait_s > 0
    assert sum(r[8] is not None for r in quiet.records) >= 3, "some steps were budgeted"
    results = [{k: v for k, v in (rt.flops.result or {}).items() if k != "t"} for rt in runs]
    assert results[0] == results[1] and results[0].get("seq") == 30
    assert quiet.cuda_device == full_rt.cuda_device
    assert quiet.errors == full_rt.errors == 0
    if quiet.gpu is not None:
        timed = sum(r[R_GPU] is not None for r in quiet.records)
        if gpu_every is not None:
            assert timed >= 300 // 4 - 2 and timed < 300
        else:  # about 0.4 s of 1.2 ms steps, eight of them slow: a few timed on schedule, the rest after slow ones
            assert 8 <= timed <= 30, timed


def test_a_request_is_applied_at_the_next_boundary_between_busy_ones(clock: Clock) -> None:
    rt = HookRuntime(torch, clock=clock)
    _drive(rt, clock, 3)
    assert rt.seq < rt._quiet_until - 1, "the next boundary is a quiet one"
    rt.control.append(("knobs", {"cudnn_benchmark": False}, None))
    _drive(rt, clock, 1)
    assert rt.knobs.applied == {"cudnn_benchmark": False} and not rt.control
