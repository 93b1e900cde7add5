"""The scenarios' shared plumbing: their arguments, the device, the timed loop and the JSON line it ends with."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

EXIT_NOT_HERE = 3
"""The scenario (or one of its fixes) cannot run on this machine: the runner reports it as skipped."""


def parse(doc: str, fixes: Sequence[str], argv: list[str] | None = None) -> argparse.Namespace:
    """--duration, --fix (repeatable, one of `fixes`), --device and --warmup, with the script's docstring as help."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds to train (default 20)")
    parser.add_argument(
        "--fix", action="append", default=[], choices=list(fixes) or None, help="remove this cause (repeatable)"
    )
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds left out of the measure at the start (default 3)"
    )
    args = parser.parse_args(argv)
    if not fixes and args.fix:
        parser.error("this scenario has no cause to fix")
    args.fix = sorted(set(args.fix))
    return args


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        not_here("--device cuda: no CUDA device here")
    return torch.device(requested)


def not_here(reason: str) -> None:
    print(f"not runnable here: {reason}", file=sys.stderr, flush=True)
    sys.exit(EXIT_NOT_HERE)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 2


def many_workers() -> int:
    """The `workers` fix: all the cores but two (one for the training thread, one for the rest), at least 2."""
    return max(2, cpu_count() - 2)


def gaussian_kernel(size: int, sigma: float, channels: int) -> torch.Tensor:
    """A depthwise 2-D gaussian kernel of shape (channels, 1, size, size)."""
    x = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(channels, 1, size, size).contiguous()


def preprocess(images: torch.Tensor, kernel: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 NCHW images -> float, normalised, blurred (a full 2-D convolution) and resized, on the images' device
    (the kernel must already be there)."""
    x = images.float().div_(255.0).sub_(0.45).div_(0.225)
    x = F.conv2d(x, kernel, padding=kernel.shape[-1] // 2, groups=x.shape[1])
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)


class Meter:
    """Yields step numbers for `duration` seconds; the measure starts after `warmup` seconds (and 3 steps) and ends
    with the run, each end after a device synchronize (the only two it adds). report() prints the JSON line.
    With `agree` (ranks of one job), the stop is decided together every `check_every` steps."""

    def __init__(
        self,
        scenario: str,
        fixed: Sequence[str],
        device: torch.device,
        duration: float,
        warmup: float,
        samples_per_step: int,
        report: bool = True,
        agree: Callable[[bool], bool] | None = None,
        check_every: int = 1,
    ) -> None:
        self.scenario = scenario
        self.fixed = list(fixed)
        self.device = device
        self.duration = duration
        self.warmup = min(warmup, duration * 0.4)
        self.samples_per_step = samples_per_step
        self.reporting = report
        self.agree = agree
        self.check_every = check_every
        self.first_step: int | None = None
        self.started = 0.0
        self.ended = 0.0
        self.steps = 0
        if report:
            print(f"scenario {scenario} on {device}, fixed: {self.fixed or 'nothing'}", file=sys.stderr, flush=True)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __iter__(self) -> Iterator[int]:
        begun = time.monotonic()
        deadline = begun + self.duration
        step = 0
        while True:
            now = time.monotonic()
            if self.first_step is None and step >= 3 and now - begun >= self.warmup:
                self._sync()
                self.first_step, self.started = step, time.monotonic()
            if step % self.check_every == 0:
                # Past the deadline with a measure begun; or never 3 steps in twice the time: stop, measuring nothing.
                stop = (now >= deadline and self.first_step is not None) or now >= deadline + self.duration
                if self.agree is not None:  # ranks stop at the same step, whichever reached its deadline first
                    stop = self.agree(stop)
                if stop:
                    break
            yield step
            step += 1
        self._sync()
        self.ended = time.monotonic()
        self.steps = step - (self.first_step if self.first_step is not None else step)

    def report(self) -> None:
        if not self.reporting:
            return
        seconds = self.ended - self.started if self.steps else 0.0
        line = {
            "scenario": self.scenario,
            "fixed": self.fixed,
            "steps": self.steps,
            "seconds": round(seconds, 4),
            "step_ms": round(seconds / self.steps * 1000, 4) if self.steps else None,
            "samples_per_s": round(self.steps * self.samples_per_step / seconds, 3) if seconds > 0 else None,
            "samples_per_step": self.samples_per_step,
            "device": str(self.device),
        }
        print(json.dumps(line), flush=True)


def forever(loader: Iterable[Any]) -> Iterator[Any]:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def small_cnn(channels: int = 64, classes: int = 10) -> nn.Module:
    """A few strided convolutions, pooled to a linear classifier: a few ms a step on a GPU for batch 64-128."""
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, stride=2, padding=1),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.Conv2d(channels, channels * 2, 3, stride=2, padding=1),
        nn.BatchNorm2d(channels * 2),
        nn.ReLU(),
        nn.Conv2d(channels * 2, channels * 4, 3, stride=2, padding=1),
        nn.BatchNorm2d(channels * 4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels * 4, classes),
    )


class Heavy96(Dataset[tuple[torch.Tensor, int]]):
    """Each sample costs real CPU in __getitem__: a 3x96x96 image from its seed, a random flip, a colour jitter and
    `rounds` rounds of 5x5 smoothing (about 0.15 ms of one core a round)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.kernel = torch.full((3, 1, 5, 5), 1 / 25)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 96, 96, generator=generator)
        if index % 2:
            image = image.flip(-1)
        image = image * (0.8 + 0.4 * torch.rand(3, 1, 1, generator=generator))
        for _ in range(self.rounds):
            image = F.conv2d(image.unsqueeze(0), self.kernel, padding=2, groups=3).squeeze(0)
        return image, index % 10


class RawBatches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Ready uint8 batches (a pool of 8 made once): the workers do next to nothing."""

    def __init__(self, batch: int, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.pool = [
            torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=generator) for _ in range(8)
        ]
        self.labels = torch.randint(0, 10, (batch,), generator=generator)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool[index % len(self.pool)], self.labels


Batch = tuple[torch.Tensor, torch.Tensor]


class LossReader:
    """The loss read back to the host: with `every_step`, `.item()` each step (a sync every step); else summed on
    the device and read once every 100 steps."""

    def __init__(self, device: torch.device, every_step: bool) -> None:
        self.every_step = every_step
        self.running = torch.zeros((), device=device)
        self.total = 0.0

    def __call__(self, step: int, loss: torch.Tensor) -> None:
        if self.every_step:
            self.total += loss.item()  # a sync every step
            return
        self.running += loss.detach()
        if step % 100 == 99:
            self.total += self.running.item()
            self.running.zero_()


def train_classifier(
    meter: Meter,
    batches: Iterable[Batch],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    prepare: Callable[[torch.Tensor, torch.Tensor], Batch],
    after_step: Callable[[int, torch.Tensor], None] | None = None,
) -> None:
    """The scenarios' one training loop: each batch made ready (`prepare`: the inputs and labels on the device),
    forward, cross-entropy, backward, an optimizer step, then `after_step` with the loss; the JSON line at the end."""
    for step, (images, labels) in zip(meter, batches, strict=False):
        x, y = prepare(images, labels)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if after_step is not None:
            after_step(step, loss)
    meter.report()


def to_device(device: torch.device, non_blocking: bool) -> Callable[[torch.Tensor, torch.Tensor], Batch]:
    """A `prepare` for train_classifier that only copies the batch to `device`."""

    def prepare(images: torch.Tensor, labels: torch.Tensor) -> Batch:
        return images.to(device, non_blocking=non_blocking), labels.to(device, non_blocking=non_blocking)

    return prepare
