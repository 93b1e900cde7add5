"""healthy_conv: a small ResNet-style convnet (channels_last, bf16 autocast, cudnn.benchmark) on 128x128 images,
batch 256, fed by 8 DataLoader workers doing light work (a random crop and flip of ready uint8 images) into pinned
memory, copied non_blocking and normalised on the device. Expected: healthy (no cause to fix).
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, cpu_count, forever, parse, pick_device
from torch import nn
from torch.utils.data import DataLoader, Dataset

FIXES: tuple[str, ...] = ()


class LightImages(Dataset[tuple[torch.Tensor, int]]):
    """A random 128x128 crop of one of 64 ready 3x144x144 uint8 images, flipped every other sample: microseconds."""

    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.size = size
        self.images = torch.randint(0, 256, (64, 3, size + 16, size + 16), dtype=torch.uint8, generator=generator)

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        top, left = (index * 7) % 16, (index * 13) % 16
        image = self.images[index % 64, :, top : top + self.size, left : left + self.size]
        if index % 2:
            image = image.flip(-1)
        return image.contiguous(), index % 100


def block(cin: int, cout: int, stride: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


def convnet(classes: int = 100) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        block(64, 64, 1),
        block(64, 128, 2),
        block(128, 256, 2),
        block(256, 512, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(512, classes),
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    torch.backends.cudnn.benchmark = True
    size, batch = (128, 256) if cuda else (64, 16)
    loader = DataLoader(
        LightImages(size),
        batch_size=batch,
        num_workers=min(8, cpu_count()),
        pin_memory=cuda,
        persistent_workers=True,
        prefetch_factor=4,
    )
    model = convnet().to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    meter = Meter("healthy_conv", args.fix, device, args.duration, args.warmup, batch)
    for _, (images, labels) in zip(meter, forever(loader), strict=False):
        x = images.to(device, non_blocking=cuda).float().sub_(mean).div_(std)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), labels.to(device, non_blocking=cuda))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
