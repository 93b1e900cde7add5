"""A generated job's torch parts: its models, datasets and the host-side optimizer of the cpu_optimizer cause."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

CLASSES = 10


class Block(nn.Module):
    def __init__(self, width: int, ratio: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, width * ratio)
        self.down = nn.Linear(width * ratio, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    """A body and a classifier head; forward gives (logits, the body's features)."""

    def __init__(self, body: nn.Module, features: int, pool: str) -> None:
        super().__init__()
        self.body = body
        self.head = nn.Linear(features, CLASSES)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x)
        if self.pool == "seq":
            features = features.mean(dim=1)
        return self.head(features), features


def build_model(kind: str, sizes: Mapping[str, int]) -> Net:
    if kind == "mlp":
        body: nn.Module = nn.Sequential(*[Block(sizes["width"], sizes["ratio"]) for _ in range(sizes["depth"])])
        return Net(body, sizes["width"], "none")
    if kind in ("wide", "tiny"):
        layers: list[nn.Module] = []
        for _ in range(sizes["depth"]):
            layers += [nn.Linear(sizes["width"], sizes["width"]), nn.ReLU()]
        return Net(nn.Sequential(*layers), sizes["width"], "none")
    if kind == "cnn":
        c = sizes["channels"]
        convs: list[nn.Module] = []
        for cin, cout in ((3, c), (c, c * 2), (c * 2, c * 4), (c * 4, c * 4)):
            convs += [nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
        body = nn.Sequential(*convs, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        return Net(body, c * 4, "none")
    layer = nn.TransformerEncoderLayer(
        sizes["d_model"], sizes["heads"], 4 * sizes["d_model"], dropout=0.0, batch_first=True, norm_first=True
    )
    return Net(nn.TransformerEncoder(layer, sizes["depth"], enable_nested_tensor=False), sizes["d_model"], "seq")


def sample_shape(kind: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
    if kind == "cnn":
        return (3, sizes["image"], sizes["image"])
    if kind == "transformer":
        return (sizes["seq"], sizes["d_model"])
    return (sizes["width"],)


def random_batches(shape: Sequence[int], batch: int, count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, *shape, generator=generator), torch.randint(0, CLASSES, (batch,), generator=generator))
        for _ in range(count)
    ]


class CostlySamples(Dataset[tuple[torch.Tensor, int]]):
    """Each sample costs `rounds` of 5x5 smoothing of a 3x48x48 image in __getitem__ (a decode and augmentation's
    stand-in), then comes out in the model's input shape."""

    def __init__(self, shape: Sequence[int], rounds: int) -> None:
        self.shape = tuple(shape)
        self.rounds = rounds
        self.kernel = torch.full((3, 1, 5, 5), 1 / 25)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(1, 3, 48, 48, generator=generator)
        for _ in range(self.rounds):
            image = F.conv2d(image, self.kernel, padding=2, groups=3)
        sample = torch.randn(self.shape, generator=generator) + image.mean() * 1e-3
        return sample, index % CLASSES


class ReadyBatches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Ready batches from a pool made once: the workers do next to nothing (a fast loader)."""

    def __init__(self, pool: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.pool = list(pool)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool[index % len(self.pool)]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 2


def many_workers() -> int:
    """All the cores but two (one for the training thread, one for the rest), at least 2."""
    return max(2, cpu_count() - 2)


def per_sample_loader(dataset: Dataset[Any], batch: int, workers: int, pin: bool) -> DataLoader[Any]:
    return DataLoader(
        dataset,
        batch_size=batch,
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=workers > 0,
        shuffle=False,
    )


def ready_loader(pool: Sequence[tuple[torch.Tensor, torch.Tensor]], pin: bool) -> DataLoader[Any]:
    return DataLoader(ReadyBatches(pool), batch_size=None, num_workers=2, pin_memory=pin, persistent_workers=True)


def forever(loader: DataLoader[Any]) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (one iterator: its persistent workers keep running)."""
    while True:
        yield from loader


def cpu_math(x: torch.Tensor, rounds: int) -> torch.Tensor:
    """Per-batch standardisation and squashing, `rounds` times: tensor math a job might do on the host or the GPU."""
    for _ in range(rounds):
        x = (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + 1e-5)
        x = torch.tanh(x * 1.5)
    return x


def weight_of(label: int, terms: int) -> float:
    """A per-sample loss weight computed in Python, term by term (the same formula as weights_of)."""
    total = 1.0
    for k in range(1, terms + 1):
        total += ((label + k) % 7) * 1e-3
    return total


def weights_of(labels: torch.Tensor, terms: int) -> torch.Tensor:
    """weight_of for every label at once, as tensor math."""
    k = torch.arange(1, terms + 1, device=labels.device)
    return 1.0 + (((labels[:, None] + k[None, :]) % 7).sum(dim=1)).float() * 1e-3


class HostOptimizer:
    """Adam on fp32 master copies of some parameters on the host: each step their gradients are copied down, the
    host steps them and the weights go back up (an offload); the rest step on the device."""

    def __init__(self, params: Sequence[nn.Parameter], offloaded: float, lr: float) -> None:
        count = max(1, round(len(params) * offloaded))
        self.remote = list(params[:count])
        self.masters = [p.detach().to("cpu", copy=True) for p in self.remote]
        for master in self.masters:
            master.grad = torch.zeros_like(master)
        self.host = torch.optim.Adam(self.masters, lr=lr)
        local = list(params[count:])
        self.device = torch.optim.Adam(local, lr=lr) if local else None

    def step(self) -> None:
        for param, master in zip(self.remote, self.masters, strict=True):
            if param.grad is not None:
                assert master.grad is not None
                master.grad.copy_(param.grad)
        self.host.step()
        for param, master in zip(self.remote, self.masters, strict=True):
            param.data.copy_(master)
        if self.device is not None:
            self.device.step()
