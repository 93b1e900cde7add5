"""two_cause_cpu_sync: two causes at once, both on the training thread. It converts, normalises, blurs (5x5 gaussian)
and resizes each uint8 batch on the CPU (intra-op threads capped at 4) before the copy, and reads the loss with
.item() every step, so that CPU work can never overlap the GPU's step either. Expected: cpu_bound first, host_sync
second; ablate each alone and both.

--fix gpu_preprocess: copy the uint8 batch first (pinned, non_blocking), the same ops on the device.
--fix no_sync: the running loss summed on the device, read once every 100 steps.
"""

from __future__ import annotations

import sys

import torch
from scenario_common import (
    Batch,
    LossReader,
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

FIXES = ("gpu_preprocess", "no_sync")


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    on_gpu = "gpu_preprocess" in args.fix
    no_sync = "no_sync" in args.fix
    torch.set_num_threads(4)
    batch, raw, size = (64, 128, 112) if device.type == "cuda" else (16, 96, 80)
    kernel = gaussian_kernel(5, 1.5, 3)
    device_kernel = kernel.to(device)  # once: a pageable copy every step would sync
    loader = DataLoader(RawBatches(batch, raw), batch_size=None, num_workers=4, pin_memory=device.type == "cuda")
    model = small_cnn(channels=128).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    meter = Meter("two_cause_cpu_sync", args.fix, device, args.duration, args.warmup, batch)

    def prepare(images: torch.Tensor, labels: torch.Tensor) -> Batch:
        if on_gpu:
            x = preprocess(images.to(device, non_blocking=True), device_kernel, size)
        else:
            x = preprocess(images, kernel, size).to(device)
        return x, labels.to(device, non_blocking=True)

    train_classifier(meter, forever(loader), model, optimizer, prepare, LossReader(device, every_step=not no_sync))
    return 0


if __name__ == "__main__":
    sys.exit(main())
