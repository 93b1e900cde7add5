"""A synthetic image-classification dataset generated from the index, optionally augmenting in __getitem__."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from .augment import augment_image, augmentation_generator

NUM_CLASSES = 100
TEMPLATE_SIZE = 8
NOISE_LEVEL = 96

Sample = tuple[torch.Tensor, int, int, int]
"""(image, label, index, pid of the process that made it)."""


class SyntheticImages(Dataset[Sample]):
    """Images of 100 classes: a per-class colour pattern plus index-seeded noise, as 3xHxW uint8.

    With `augment_out_size` set, __getitem__ also augments the image (so DataLoader workers do the
    CPU work) and returns a normalized float32 3 x out x out tensor instead.
    """

    def __init__(self, length: int, image_size: int, seed: int = 0, augment_out_size: int | None = None) -> None:
        self.length = length
        self.image_size = image_size
        self.seed = seed
        self.augment_out_size = augment_out_size
        generator = torch.Generator().manual_seed(seed)
        patterns = torch.randint(
            0, 256 - NOISE_LEVEL, (NUM_CLASSES, 3, TEMPLATE_SIZE, TEMPLATE_SIZE), generator=generator
        )
        self.templates = F.interpolate(patterns.float(), size=(image_size, image_size), mode="nearest").to(torch.uint8)

    def __len__(self) -> int:
        return self.length

    def image(self, index: int) -> tuple[torch.Tensor, int]:
        """The raw uint8 image and label of `index`, the same on every call and in every process."""
        generator = torch.Generator().manual_seed(self.seed * 7_919 + index)
        label = int(torch.randint(0, NUM_CLASSES, (), generator=generator))
        noise = torch.randint(
            0, NOISE_LEVEL, (3, self.image_size, self.image_size), dtype=torch.uint8, generator=generator
        )
        return self.templates[label] + noise, label

    def __getitem__(self, index: int) -> Sample:
        image, label = self.image(index)
        if self.augment_out_size is not None:
            image = augment_image(image, self.augment_out_size, augmentation_generator(self.seed, index))
        return image, label, index, os.getpid()
