"""A training job that records the NVTX ranges the hook opens: torch.cuda.nvtx's range_push/range_pop are replaced
by recorders before training (--no-recorder keeps torch's own). Two epochs of 5 steps, with a forward that raises
once (step 2) and a second backward through a freed graph that raises once (step 3), both caught by the loop.
--compile: the model under torch.compile (the eager backend: dynamo traces, nothing is compiled to code), no
failures injected.

argv: EVENTS SUMMARY. EVENTS gets one JSON line per push ["push", name] or pop ["pop"], written as it happens
(so the pops at exit are in it); SUMMARY gets {"steps", "hook_steps", "hook_errors"} after the loop (and
"graph_breaks" with --compile).
"""

from __future__ import annotations

import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import gpumon.hook  # the line a user adds (already installed when injected by gpumon run)

events_path, summary_path = sys.argv[1], sys.argv[2]
events = open(events_path, "w", buffering=1)  # noqa: SIM115 - open until the interpreter exits
if "--no-recorder" not in sys.argv:
    depth = [0]

    def range_push(name: str) -> int:
        events.write(json.dumps(["push", name]) + "\n")
        depth[0] += 1
        return depth[0] - 1

    def range_pop() -> int:
        events.write('["pop"]\n')
        depth[0] -= 1
        return depth[0]

    torch.cuda.nvtx.range_push = range_push
    torch.cuda.nvtx.range_pop = range_pop


class Flaky(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail:
            raise ValueError("injected failure in forward")
        return x


torch.manual_seed(0)
flaky = Flaky()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), flaky, torch.nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
compiled = "--compile" in sys.argv
forward = torch.compile(model, backend="eager") if compiled else model
loader = DataLoader(TensorDataset(torch.randn(40, 8), torch.randint(0, 2, (40,))), batch_size=8)
steps = 0
for epoch in range(2):
    for i, (x, y) in enumerate(loader):
        if (epoch, i) == (0, 1) and not compiled:
            flaky.fail = True
            try:
                model(x)
            except ValueError:
                pass
            flaky.fail = False
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        optimizer.zero_grad()
        loss.backward()
        if (epoch, i) == (0, 2) and not compiled:
            try:
                loss.backward()  # the graph's buffers are freed: raises
            except RuntimeError:
                pass
        optimizer.step()
        steps += 1

runtime = gpumon.hook.lifecycle.runtime()
result = {"steps": steps, "hook_steps": runtime.seq, "hook_errors": runtime.errors}
if runtime.errors:  # in the test's failure message (it shows stderr)
    print(f"hook's last error: {runtime.last_error!r}", file=sys.stderr)
if compiled:
    from torch._dynamo.utils import counters

    result["graph_breaks"] = sum(counters["graph_break"].values())
with open(summary_path, "w") as summary:
    json.dump(result, summary)
