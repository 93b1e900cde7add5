"""The deliberately slow training loop: real CPU augmentation, pageable copies, fp32, a small batch.

Every slow choice is a knob (see knobs.py), so gpumon's experiments can fix them one by one.

Shutdown: the first SIGINT or SIGTERM makes the loop stop at the next step boundary (so the main
process is never interrupted half-way through receiving a batch from a worker); a second one
raises `StopTraining` at once; signals during cleanup are only recorded. The `finally` block
shuts the DataLoader's worker processes down explicitly (`_shutdown_workers`, the same call the
iterator's destructor makes, which joins them and terminates stragglers) before `run` returns,
so no worker outlives the trainer. Workers reset both signals to their defaults on start and ask
Linux to SIGTERM them if the trainer dies without cleaning up (PR_SET_PDEATHSIG, e.g. SIGKILL).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from .augment import augment_batch
from .data import NUM_CLASSES, SyntheticImages
from .knobs import CHANGEABLE_WHILE_RUNNING, KnobError, default_knobs, validate_knobs
from .live_knobs import LiveLoaderSettings, ScriptKnobRequests

LOG_PREFIX = "gpumon-demo: "
EXIT_CODE_FOR_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Profile:
    """Sizes of the data and the model."""

    name: str
    image_size: int
    crop_size: int
    width: int
    stage_blocks: tuple[int, ...]
    stem_stride: int


PROFILES = {
    # The GPU demo: 128x128 images cropped to 112, a ResNet-18-like model of width 48 whose first
    # stage runs at full resolution. Balanced on an H100 with 16 CPUs (benchmarks/demo_calibrate.py):
    # fp32 at batch 32 takes ~0.57 ms of GPU per sample against ~1.5 ms of main-process CPU (so
    # GPU-Util starts below 30%), while bf16 + channels_last at batch 256 needs ~0.17 ms per sample,
    # about what 14 augmenting workers deliver, so the tuned job ends GPU-bound.
    "full": Profile("full", image_size=128, crop_size=112, width=48, stage_blocks=(2, 2, 2, 2), stem_stride=1),
    # The CPU fallback: a step of batch 32 takes well under a second on 2 cores.
    "small": Profile("small", image_size=64, crop_size=56, width=8, stage_blocks=(1, 1, 1, 1), stem_stride=2),
}


class DemoError(Exception):
    """Bad settings for the demo (e.g. CUDA asked for but absent); the message is one line."""


class StopTraining(KeyboardInterrupt):
    """Raised in the training loop by SIGINT or SIGTERM; a KeyboardInterrupt so library code treats it as one."""


@dataclass
class TrainConfig:
    """What to run: knobs (partial; the rest take their defaults) and how long."""

    knobs: dict[str, Any] = field(default_factory=dict)
    device: str = "auto"
    """auto (CUDA when available, else the CPU), cuda, cuda:N or cpu."""
    duration: float | None = 60.0
    """Seconds of training, warm-up included; None for no limit."""
    steps: int | None = None
    """Number of steps; None for no limit. With both set, whichever comes first stops the run."""
    profile: str = "auto"
    """auto (full on CUDA, small on the CPU), full or small."""
    warmup_steps: int = 10
    """Steps left out of the steady-state figures (worker start-up, cuDNN autotuning, allocator)."""
    dataset_size: int = 1_281_167
    """Samples per epoch: as many as ImageNet-1k's training set, so a 10 s experiment never meets an epoch end."""
    seed: int = 0
    learning_rate: float = 0.05
    progress_interval: float = 5.0
    """Seconds between progress lines on stderr; 0 for none."""


class _SignalStopper:
    """Records the first SIGINT/SIGTERM for the loop to stop on; a second one raises StopTraining."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.cleaning_up = False
        """Set once the run is shutting down: from then on signals are only recorded."""
        self._raised = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
        elif not self.cleaning_up and not self._raised:
            self._raised = True
            raise StopTraining(self.signal_name)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def _init_worker(_worker_id: int, trainer_pid: int) -> None:
    """DataLoader worker start: default signal handling, and die with the trainer."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != trainer_pid:
        os._exit(0)  # the trainer died before the death signal was armed


def resolve_device(requested: str) -> torch.device:
    """The device to train on; raises DemoError for CUDA without CUDA or an unknown name."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise DemoError(f"unknown device {requested!r} (use auto, cuda, cuda:N or cpu)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DemoError("--device cuda asked for, but torch.cuda.is_available() is False")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DemoError(f"no {device} here: {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise DemoError(f"unsupported device {requested!r} (use auto, cuda, cuda:N or cpu)")
    return device


def resolve_profile(requested: str, device: torch.device) -> Profile:
    if requested == "auto":
        return PROFILES["full" if device.type == "cuda" else "small"]
    if requested not in PROFILES:
        raise DemoError(f"unknown profile {requested!r} (use auto, {', '.join(PROFILES)})")
    return PROFILES[requested]


def _apply_backend_knobs(knobs: dict[str, Any]) -> Callable[[], None]:
    """Sets the global TF32 / cuDNN flags from the knobs; returns a function that restores them."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    if knobs["tf32"] is not None:
        torch.backends.cuda.matmul.allow_tf32 = knobs["tf32"]
        torch.backends.cudnn.allow_tf32 = knobs["tf32"]
    torch.backends.cudnn.benchmark = knobs["cudnn_benchmark"]

    def restore() -> None:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
        ) = saved

    return restore


def make_loader(dataset: SyntheticImages, knobs: dict[str, Any], seed: int, notes: list[str]) -> DataLoader:
    """The DataLoader the knobs describe; knobs that need workers are dropped (with a note) without."""
    options: dict[str, Any] = {
        "batch_size": knobs["batch_size"],
        "shuffle": True,
        "drop_last": True,
        "num_workers": knobs["num_workers"],
        "pin_memory": knobs["pin_memory"],
        "generator": torch.Generator().manual_seed(seed),
        "worker_init_fn": partial(_init_worker, trainer_pid=os.getpid()),
    }
    if knobs["num_workers"] > 0:
        options["persistent_workers"] = knobs["persistent_workers"]
        if knobs["prefetch_factor"] is not None:
            options["prefetch_factor"] = knobs["prefetch_factor"]
    else:
        for name in ("prefetch_factor", "persistent_workers"):
            if knobs[name] not in (None, False):
                notes.append(f"{name} ignored: it needs num_workers > 0")
    return DataLoader(dataset, **options)


def _loader_settings(loader: DataLoader) -> dict[str, Any]:
    """The loader's settings as they are now (gpumon's hook may have changed them since it was made)."""
    return {
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "prefetch_factor": loader.prefetch_factor if loader.num_workers > 0 else None,
        "persistent_workers": loader.persistent_workers,
    }


def _changeable_values(knobs: dict[str, Any]) -> dict[str, Any]:
    return {name: knobs[name] for name in CHANGEABLE_WHILE_RUNNING}


def _convert_memory_format(model: torch.nn.Module, optimizer: torch.optim.Optimizer, channels_last: bool) -> None:
    """The model's 4-d weights, gradients and optimizer state in channels_last (or back to NCHW), as if built so."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model.to(memory_format=memory_format)
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() == 4:
                state[key] = value.contiguous(memory_format=memory_format)


def _shutdown_workers(iterator: Iterator[Any] | None) -> None:
    """Stops and joins the iterator's worker processes now rather than at garbage collection."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stderr(line: str) -> None:
    print(LOG_PREFIX + line, file=sys.stderr, flush=True)


def run(config: TrainConfig, log: Callable[[str], None] = _stderr) -> dict[str, Any]:
    """Trains until the step or time limit or a signal; returns the summary (see gpumon_demo/README.md)."""
    knobs = default_knobs() | validate_knobs(config.knobs)
    device = resolve_device(config.device)
    profile = resolve_profile(config.profile, device)
    if config.dataset_size < knobs["batch_size"]:
        raise DemoError(f"dataset size {config.dataset_size} is smaller than batch_size {knobs['batch_size']}")
    notes: list[str] = []
    if device.type == "cpu":
        why = "no CUDA device" if config.device == "auto" else "--device cpu"
        log(
            f"{why}: running on the CPU with the {profile.name} profile "
            f"({profile.image_size}px images, crop {profile.crop_size}, width {profile.width})"
        )
    restore_backends = _apply_backend_knobs(knobs)
    torch.manual_seed(config.seed)

    main_pid = os.getpid()
    fetch_pids: set[int] = set()
    augment_pids: set[int] = set()
    steps = samples = 0
    steady_start: tuple[float, float, int, int] | None = None
    steady_end: tuple[float, float, int, int] | None = None
    last_loss: float | None = None
    stopped_by = "running"
    pinned_batches: bool | None = None
    started = time.perf_counter()
    loader: DataLoader | None = None
    iterator: Iterator[Any] | None = None
    stopper = _SignalStopper()
    stopper.install()
    try:
        augment_out = profile.crop_size if knobs["augment_in_workers"] else None
        dataset = SyntheticImages(config.dataset_size, profile.image_size, config.seed, augment_out)
        loader = make_loader(dataset, knobs, config.seed, notes)
        memory_format = torch.channels_last if knobs["channels_last"] else torch.preserve_format
        model = _build_model(profile, device, memory_format)
        optimizer = torch.optim.SGD(
            model.parameters(), lr=config.learning_rate, momentum=0.9, weight_decay=5e-4, nesterov=True
        )
        non_blocking = loader.pin_memory and device.type == "cuda"
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

        started = time.perf_counter()
        last_progress = (started, 0, 0)
        loss: torch.Tensor | None = None
        live_settings = LiveLoaderSettings()
        requests = ScriptKnobRequests.from_environ(os.environ, CHANGEABLE_WHILE_RUNNING)
        if requests is not None:
            requests.answer(_changeable_values(knobs))
        iterator = iter(loader)
        while True:
            if stopper.signal_name is not None:
                stopped_by = stopper.signal_name
                break
            if config.steps is not None and steps >= config.steps:
                stopped_by = "steps"
                break
            now = time.perf_counter()
            if config.duration is not None and now - started >= config.duration:
                stopped_by = "duration"
                break
            if steady_start is None and steps >= config.warmup_steps:
                _synchronize(device)
                steady_start = (time.perf_counter(), time.process_time(), steps, samples)
            if config.progress_interval > 0 and now - last_progress[0] >= config.progress_interval:
                _log_progress(log, now, last_progress, steps, samples, last_loss)
                last_progress = (now, steps, samples)

            request = requests.poll() if requests is not None else None
            if requests is not None and request is not None:
                # A gpumon trial run asks for other values of the trainer's own knobs: apply them between steps.
                try:
                    changes = {n: v for n, v in requests.check(request[1]).items() if knobs[n] != v}
                    if changes.get("batch_size", 0) > config.dataset_size:
                        raise KnobError(f"batch_size {changes['batch_size']} > dataset size {config.dataset_size}")
                except KnobError as error:
                    requests.answer(_changeable_values(knobs), str(error))
                else:
                    knobs.update(changes)
                    if "batch_size" in changes:
                        knobs.update(_loader_settings(loader))
                        loader = make_loader(dataset, knobs, config.seed, notes)
                        previous, iterator = iterator, iter(loader)
                        _shutdown_workers(previous)
                        non_blocking = loader.pin_memory and device.type == "cuda"
                    if "channels_last" in changes:
                        memory_format = torch.channels_last if knobs["channels_last"] else torch.preserve_format
                        _convert_memory_format(model, optimizer, knobs["channels_last"])
                    if changes and device.type == "cuda":
                        _synchronize(device)
                        torch.cuda.reset_peak_memory_stats(device)  # the peak of the new settings, not the old
                    requests.answer(_changeable_values(knobs))
            if live_settings.pending(loader):
                # gpumon changed a DataLoader setting live: start the next pass over the data now so it applies.
                previous, iterator = iterator, iter(loader)
                if previous is not iterator:
                    _shutdown_workers(previous)
                live_settings.applied(loader)
                non_blocking = loader.pin_memory and device.type == "cuda"
            try:
                images, labels, indices, pids = next(iterator)
            except StopIteration:
                iterator = iter(loader)
                continue
            fetch_pids.update(pids.unique().tolist())
            if knobs["augment_in_workers"]:
                augment_pids.update(pids.unique().tolist())
            else:
                images = augment_batch(images, indices, profile.crop_size, config.seed)
                augment_pids.add(main_pid)
            if pinned_batches is None:
                pinned_batches = images.is_pinned()

            images = images.to(device, non_blocking=non_blocking, memory_format=memory_format)
            labels = labels.to(device, non_blocking=non_blocking)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=knobs["amp_bf16"]):
                loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            samples += labels.shape[0]
            if steps % knobs["log_every"] == 0:
                last_loss = loss.item()

        _synchronize(device)
        if loss is not None:
            last_loss = loss.item()
        if steady_start is not None:
            steady_end = (time.perf_counter(), time.process_time(), steps, samples)
    except StopTraining:
        stopped_by = stopper.signal_name or "SIGINT"
    except Exception:
        # Workers ended by the same signal (Ctrl+C reaches the whole process group) surface as an
        # error from the DataLoader; after a signal that is a stop, not a crash.
        if stopper.signal_name is None:
            raise
        stopped_by = stopper.signal_name
    finally:
        stopper.cleaning_up = True
        if steady_start is not None and steady_end is None and steps > steady_start[2]:
            # Stopped by a signal (or an error): the steady window ends here.
            with contextlib.suppress(Exception):
                _synchronize(device)
            steady_end = (time.perf_counter(), time.process_time(), steps, samples)
        _shutdown_workers(iterator)
        _shutdown_workers(getattr(loader, "_iterator", None))
        iterator = None
        stopper.restore()
        restore_backends()

    if stopper.signal_name is not None:
        stopped_by = stopper.signal_name
    ended = time.perf_counter()
    return _summary(
        config=config, knobs=knobs, device=device, profile=profile, loader=loader, notes=notes,
        steps=steps, samples=samples, elapsed=ended - started, steady_start=steady_start,
        steady_end=steady_end, last_loss=last_loss, stopped_by=stopped_by, main_pid=main_pid,
        fetch_pids=fetch_pids, augment_pids=augment_pids, pinned_batches=pinned_batches,
    )  # fmt: skip


def _build_model(profile: Profile, device: torch.device, memory_format: torch.memory_format) -> torch.nn.Module:
    from .model import SmallResNet

    model = SmallResNet(NUM_CLASSES, profile.width, profile.stage_blocks, profile.stem_stride)
    return model.to(device=device, memory_format=memory_format)


def _log_progress(
    log: Callable[[str], None], now: float, last: tuple[float, int, int], steps: int, samples: int, loss: float | None
) -> None:
    seconds = now - last[0]
    loss_text = f"  loss {loss:.3f}" if loss is not None else ""
    log(
        f"step {steps}  {(steps - last[1]) / seconds:.1f} steps/s  "
        f"{(samples - last[2]) / seconds:.0f} samples/s{loss_text}"
    )


def _summary(
    *,
    config: TrainConfig,
    knobs: dict[str, Any],
    device: torch.device,
    profile: Profile,
    loader: DataLoader | None,
    notes: list[str],
    steps: int,
    samples: int,
    elapsed: float,
    steady_start: tuple[float, float, int, int] | None,
    steady_end: tuple[float, float, int, int] | None,
    last_loss: float | None,
    stopped_by: str,
    main_pid: int,
    fetch_pids: set[int],
    augment_pids: set[int],
    pinned_batches: bool | None,
) -> dict[str, Any]:
    steady: dict[str, Any] = {
        "steps": None, "samples": None, "seconds": None,
        "samples_per_s": None, "steps_per_s": None, "main_cpu_s_per_sample": None,
    }  # fmt: skip
    if steady_start is not None and steady_end is not None and steady_end[2] > steady_start[2]:
        seconds = steady_end[0] - steady_start[0]
        steady_samples = steady_end[3] - steady_start[3]
        steady = {
            "steps": steady_end[2] - steady_start[2],
            "samples": steady_samples,
            "seconds": seconds,
            "samples_per_s": steady_samples / seconds,
            "steps_per_s": (steady_end[2] - steady_start[2]) / seconds,
            "main_cpu_s_per_sample": (steady_end[1] - steady_start[1]) / steady_samples,
        }
    dataloader = None
    if loader is not None:
        dataloader = {
            "batch_size": loader.batch_size,
            "num_workers": loader.num_workers,
            "prefetch_factor": loader.prefetch_factor,
            "pin_memory": loader.pin_memory,
            "persistent_workers": loader.persistent_workers,
            "batches_pinned": pinned_batches,
        }
    return {
        "steps": steps,
        "samples": samples,
        "elapsed_s": elapsed,
        "warmup_steps": config.warmup_steps,
        "steady": steady,
        "samples_per_s": steady["samples_per_s"],
        "stopped_by": stopped_by,
        "final_loss": last_loss,
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
        "profile": asdict(profile),
        "knobs": knobs,
        "dataloader": dataloader,
        "main_pid": main_pid,
        "fetch_pids": sorted(fetch_pids),
        "augment_pids": sorted(augment_pids),
        "torch": torch.__version__,
        "notes": notes,
    }
