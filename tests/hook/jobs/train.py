"""A small training job for the hook tests; prints its own measurements as JSON lines on stdout.

Events: {"event": "ready", "pid"} once set up, {"event": "done", ...} after the loop. With
GPUMON_TEST_GO set it waits for that file before training; with GPUMON_TEST_RELEASE set it waits for
that file before exiting (so the test can still query the hook).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--no-import" not in sys.argv:
    import gpumon.hook  # noqa: F401 - the line a user adds

import torch
from torch.utils.data import DataLoader, Dataset


class SleepyDataset(Dataset):
    def __init__(self, size: int, sleep_s: float) -> None:
        self.size = size
        self.sleep_s = sleep_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return torch.full((16,), float(index % 7)), torch.tensor(index % 2)


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def wait_for(env_name: str, limit: float = 30.0) -> None:
    path = os.environ.get(env_name)
    if not path:
        return
    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


def break_server(failures: int) -> None:
    """Make the next `failures` turns of the hook server's loop raise (the server must restart itself)."""
    import importlib

    server = importlib.import_module("gpumon.hook.lifecycle").server()
    serve_once = server._serve_once
    left = [failures]

    def failing_serve_once() -> None:
        if left[0] > 0:
            left[0] -= 1
            raise RuntimeError("injected failure in the server loop")
        serve_once()

    server._serve_once = failing_serve_once


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--mode",
        default="optimizer",
        choices=["optimizer", "manual_sgd", "manual_sgd_nodl", "inference", "manual_step"],
    )
    parser.add_argument("--steps", type=int, default=30, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=0.0, help="keep running epochs until this long")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--item-sleep-ms", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--collate-sleep-ms", type=float, default=0.0, help="a collate_fn that takes this long")
    parser.add_argument("--start-method", default=None)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--break-internals", action="store_true")
    parser.add_argument("--no-import", action="store_true")
    parser.add_argument("--break-server", type=int, default=0, help="make the hook's server loop fail N times")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05) if args.mode == "optimizer" else None
    dataset = SleepyDataset(args.steps * args.batch, args.item_sleep_ms / 1e3)
    loader = None
    if args.mode not in ("manual_sgd_nodl", "manual_step"):
        collate = None
        if args.collate_sleep_ms:

            def collate(items, pause=args.collate_sleep_ms / 1e3):
                time.sleep(pause)
                return torch.utils.data.default_collate(items)

        loader = DataLoader(
            dataset,
            batch_size=args.batch,
            num_workers=args.workers,
            collate_fn=collate,
            multiprocessing_context=args.start_method if args.workers else None,
            persistent_workers=args.persistent and args.workers > 0,
        )
    if args.break_internals:
        import importlib

        def broken(*_args, **_kwargs):
            raise RuntimeError("injected failure inside the hook")

        class BrokenIterators(dict):  # the first thing each fetch looks up, plain or not
            get = broken

        runtime = importlib.import_module("gpumon.hook.lifecycle").runtime()
        runtime._iterators = BrokenIterators()
        runtime.on_backward = broken

    if args.break_server:
        break_server(args.break_server)

    emit(event="ready", pid=os.getpid())
    wait_for("GPUMON_TEST_GO")

    waits_ms: list[float] = []
    samples: list[int] = []
    worker_pids: list[list[int]] = []
    losses: list[torch.Tensor] = []
    steps = 0
    started = time.monotonic()
    epoch = 0
    while epoch < args.epochs or (args.seconds and time.monotonic() - started < args.seconds):
        epoch += 1
        if loader is None:
            batches = (dataset[i] for i in range(args.steps))
            iterator = None
        else:
            iterator = iter(loader)
            worker_pids.append([w.pid for w in getattr(iterator, "_workers", [])])
            batches = iterator
        while True:
            t0 = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            waits_ms.append((time.perf_counter() - t0) * 1e3)
            if x.dim() == 1:
                x, y = x.unsqueeze(0), y.unsqueeze(0)
            samples.append(int(x.shape[0]))
            if args.mode == "inference":
                with torch.no_grad():
                    model(x)
            else:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                if optimizer is not None:
                    optimizer.zero_grad()
                loss.backward()
                if optimizer is not None:
                    optimizer.step()
                else:
                    with torch.no_grad():
                        for p in model.parameters():
                            p -= 0.05 * p.grad
                            p.grad = None
                losses.append(loss.detach())
            if args.mode == "manual_step":
                sys.modules["gpumon.hook"].step()
            steps += 1
        del iterator, batches
    emit(
        event="done",
        steps=steps,
        data_wait_ms=waits_ms,
        samples=samples,
        worker_pids=worker_pids,
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
        hook_installed=bool(sys.modules.get("gpumon.hook") and sys.modules["gpumon.hook"].is_installed()),
        sitecustomize=getattr(sys.modules.get("sitecustomize"), "MARKER", None),
    )
    wait_for("GPUMON_TEST_RELEASE")


if __name__ == "__main__":
    main()
