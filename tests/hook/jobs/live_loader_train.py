"""A hooked job with one long epoch whose DataLoader gets new settings mid-epoch; it checks every index itself.

The Dataset returns its index; the DataLoader has 2 persistent workers and shuffles with a seeded generator. The job
trains until step `--pause` numbers (one at a time): there it says {"event": "paused", "step"} and waits for the file
`<control>/go<k>` (the test asks the hook for a knob change meanwhile). At each step it notes the loader's
num_workers and its live DataLoader worker processes. At the end it writes what it saw to `<control>/result.json`:
each index's count, whether the order is the sampler's, and the notes per step; then it says {"event": "done"} and
waits for `<control>/release` before exiting.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import gpumon.hook  # noqa: F401 - the line a user adds

SEED = 1234
WAIT_S = 60.0


class IndexDataset(Dataset):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(index)


class IndexStream(IterableDataset):
    """The same indices as a stream, each worker taking every n-th."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        return (torch.tensor(index) for index in range(start, self.size, step))


def sampler_order(size: int) -> list[int]:
    """The epoch's order as torch draws it: the iterator's worker seed first, then the shuffle's permutation."""
    generator = torch.Generator().manual_seed(SEED)
    torch.empty((), dtype=torch.int64).random_(generator=generator)
    return torch.randperm(size, generator=generator).tolist()


def wait_for(path: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {path} within {WAIT_S} s")
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--control", required=True)
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--pause", type=int, action="append", default=[])
    parser.add_argument("--iterable", action="store_true", help="an IterableDataset (its loader is not live)")
    args = parser.parse_args()

    if args.iterable:
        loader = DataLoader(IndexStream(args.size), batch_size=args.batch, num_workers=2, persistent_workers=True)
    else:
        loader = DataLoader(
            IndexDataset(args.size),
            batch_size=args.batch,
            shuffle=True,
            generator=torch.Generator().manual_seed(SEED),
            num_workers=2,
            persistent_workers=True,
        )
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    seen: list[int] = []
    notes: list[dict[str, int]] = []
    pauses = sorted(args.pause)
    for step, batch in enumerate(loader, start=1):
        seen.extend(batch.tolist())
        loss = model(batch.float().unsqueeze(1)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        workers = [child for child in multiprocessing.active_children() if child.is_alive()]
        notes.append({"step": step, "num_workers": loader.num_workers, "processes": len(workers)})
        if pauses and step == pauses[0]:
            pauses.pop(0)
            print(json.dumps({"event": "paused", "step": step}), flush=True)
            wait_for(os.path.join(args.control, f"go{step}"))
    counts: dict[int, int] = {}
    for index in seen:
        counts[index] = counts.get(index, 0) + 1
    result = {
        "size": args.size,
        "seen": len(seen),
        "each_once": sorted(counts) == list(range(args.size)) and set(counts.values()) == {1},
        "repeated": sorted(index for index, count in counts.items() if count > 1)[:20],
        "missing": sorted(set(range(args.size)) - set(counts))[:20],
        "in_sampler_order": seen == sampler_order(args.size),
        "notes": notes,
    }
    with open(os.path.join(args.control, "result.json"), "w") as out:
        json.dump(result, out)
    print(json.dumps({"event": "done"}), flush=True)
    wait_for(os.path.join(args.control, "release"))  # the test reads the hook's state first


if __name__ == "__main__":
    main()
