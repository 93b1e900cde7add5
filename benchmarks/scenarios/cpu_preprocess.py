"""cpu_preprocess: the DataLoader is fast (4 workers hand over ready uint8 batches), but the training thread itself
turns each batch into floats, normalises, blurs (a 5x5 gaussian, a full 2-D convolution) and resizes it on the CPU
(intra-op threads capped at 4) before the copy to the GPU, which meanwhile waits. Expected: cpu_bound.

--fix gpu_preprocess: copy the uint8 batch to the device first (pinned, non_blocking) and do the same ops there.
"""

from __future__ import annotations

import sys

import torch
from scenario_common import (
    Batch,
    Meter,
    RawBatches,
    forever,
    gaussian_kernel,
    parse,
    pick_device,
    preprocess,
    small_cnn,
    train_classifier,
)
from torch.utils.data import DataLoader

FIXES = ("gpu_preprocess",)


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    on_gpu = "gpu_preprocess" in args.fix
    torch.set_num_threads(4)
    batch, raw, size = (64, 128, 112) if device.type == "cuda" else (16, 96, 80)
    kernel = gaussian_kernel(5, 1.5, 3)
    device_kernel = kernel.to(device)  # once: a pageable copy every step would sync
    loader = DataLoader(RawBatches(batch, raw), batch_size=None, num_workers=4, pin_memory=device.type == "cuda")
    model = small_cnn().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    meter = Meter("cpu_preprocess", args.fix, device, args.duration, args.warmup, batch)

    def prepare(images: torch.Tensor, labels: torch.Tensor) -> Batch:
        if on_gpu:
            x = preprocess(images.to(device, non_blocking=True), device_kernel, size)
        else:
            x = preprocess(images, kernel, size).to(device)
        return x, labels.to(device, non_blocking=True)

    train_classifier(meter, forever(loader), model, optimizer, prepare)
    return 0


if __name__ == "__main__":
    sys.exit(main())
