"""A plain CPU training loop that knows nothing of gpumon or GPUMON_KNOBS (the hook is injected from outside).

Small epochs (so DataLoader knobs set live apply within a second), a dataset that sleeps a little per item (so the
loop waits for data), and a --seconds limit. Prints nothing.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SleepyData(Dataset):
    def __init__(self, size: int, sleep_s: float) -> None:
        self.size = size
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        time.sleep(self.sleep_s)
        return torch.full((16,), float(index % 5)), index % 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--item-sleep-ms", type=float, default=2.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SleepyData(64, args.item_sleep_ms / 1000), batch_size=8)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if time.monotonic() >= deadline:
                break


if __name__ == "__main__":
    main()
