"""CPU image augmentation in plain torch: random resized crop, flip, colour jitter, gaussian blur."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
BLUR_KERNEL_SIZE = 9
GRAY_WEIGHTS = torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)


def augmentation_generator(seed: int, index: int) -> torch.Generator:
    """The random stream for one sample's augmentation, the same in any process."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def _uniform(generator: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def _crop_box(height: int, width: int, generator: torch.Generator) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box: scale (0.08, 1), aspect ratio (3/4, 4/3), centre crop as fallback."""
    area = height * width
    log_ratio_low, log_ratio_high = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        target_area = area * _uniform(generator, 0.08, 1.0)
        aspect = math.exp(_uniform(generator, log_ratio_low, log_ratio_high))
        crop_w = round(math.sqrt(target_area * aspect))
        crop_h = round(math.sqrt(target_area / aspect))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            top = int(torch.randint(0, height - crop_h + 1, (), generator=generator))
            left = int(torch.randint(0, width - crop_w + 1, (), generator=generator))
            return top, left, crop_h, crop_w
    side = min(height, width)
    return (height - side) // 2, (width - side) // 2, side, side


def _gaussian_kernel(sigma: float) -> torch.Tensor:
    half = BLUR_KERNEL_SIZE // 2
    positions = torch.arange(-half, half + 1, dtype=torch.float32)
    kernel = torch.exp(-(positions**2) / (2 * sigma * sigma))
    return kernel / kernel.sum()


def _blur(image: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable gaussian blur of a 3xHxW float image, reflect padding."""
    kernel = _gaussian_kernel(sigma)
    pad = BLUR_KERNEL_SIZE // 2
    batch = F.pad(image.unsqueeze(0), (pad, pad, pad, pad), mode="reflect")
    horizontal = kernel.view(1, 1, 1, -1).expand(3, 1, 1, -1)
    vertical = kernel.view(1, 1, -1, 1).expand(3, 1, -1, 1)
    batch = F.conv2d(batch, horizontal, groups=3)
    batch = F.conv2d(batch, vertical, groups=3)
    return batch.squeeze(0)


def augment_image(image: torch.Tensor, out_size: int, generator: torch.Generator) -> torch.Tensor:
    """Augments one 3xHxW uint8 image into a normalized 3 x out_size x out_size float32 tensor."""
    _, height, width = image.shape
    top, left, crop_h, crop_w = _crop_box(height, width, generator)
    crop = image[:, top : top + crop_h, left : left + crop_w].float().div_(255.0)
    resized = F.interpolate(
        crop.unsqueeze(0), size=(out_size, out_size), mode="bilinear", align_corners=False, antialias=True
    ).squeeze(0)
    if float(torch.rand((), generator=generator)) < 0.5:
        resized = resized.flip(-1)
    if float(torch.rand((), generator=generator)) < 0.5:
        resized = resized.flip(-2)

    brightness = _uniform(generator, 0.6, 1.4)
    contrast = _uniform(generator, 0.6, 1.4)
    saturation = _uniform(generator, 0.6, 1.4)
    jittered = resized.mul_(brightness).clamp_(0.0, 1.0)
    gray = (jittered * GRAY_WEIGHTS).sum(dim=0, keepdim=True)
    jittered = (jittered - gray.mean()).mul_(contrast).add_(gray.mean()).clamp_(0.0, 1.0)
    gray = (jittered * GRAY_WEIGHTS).sum(dim=0, keepdim=True)
    jittered = (jittered - gray).mul_(saturation).add_(gray).clamp_(0.0, 1.0)

    blurred = _blur(jittered, sigma=_uniform(generator, 0.1, 2.0))
    return (blurred - MEAN).div_(STD)


def augment_batch(images: torch.Tensor, indices: torch.Tensor, out_size: int, seed: int) -> torch.Tensor:
    """Augments a Bx3xHxW uint8 batch sample by sample, each with its own index-seeded stream."""
    return torch.stack(
        [
            augment_image(image, out_size, augmentation_generator(seed, int(index)))
            for image, index in zip(images, indices, strict=True)
        ]
    )
