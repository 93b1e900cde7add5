"""A generated training job: built from its seed (plan.py), it trains through phases and ends with its own truth.

    python benchmarks/scenarios/generated/job.py --seed N [--device auto|cuda|cpu] [--control DIR] ...

Phases, each announced on stdout as `PHASE NAME ...`: warmup; diagnose-hook and diagnose-pyspy (the baseline, for
the runner's `gpumon diagnose` calls: each ends when DIR/NAME.done appears with --control, else after its seconds);
truth: the baseline and each cause's ablation (and all of them at once where there are 2 or more) timed in turn, in
windows of --window seconds for --rounds rounds (the order reversed every other round), samples/s measured between
two device synchronizes at each window's edges. A switch that changes the DataLoader gets its loader built before
its window and --settle seconds (and the loader's prefetched batches) left out. Last, one JSON line:
{"generated": SEED, "plan": ..., "rates": {variant: [samples/s per window]}, "median_samples_per_s": ...,
"truth": {variant: 1 - t_variant / t_base per sample}, "unsupported": {family: why}, ...}.
--plan prints the plan and exits; --ablate FAMILY removes that cause for the whole run. Exit 3: not runnable here
(the comm cause outside torchrun, or CUDA asked for without it).
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch
import torch.nn.functional as F

from benchmarks.scenarios.generated import parts
from benchmarks.scenarios.generated.plan import FAMILIES, LAUNCHES, LOADING, Plan, make_plan, measures_loading

EXIT_NOT_HERE = 3
BASE = "base"
MIN_WINDOW_STEPS = 5
"""A timed window is stretched until it holds this many steps (slow host-bound steps: a few per second)."""
LOG_EVERY = 100
"""Where a sync is ablated, its value is read every LOG_EVERY steps instead of every step."""


def variant_key(families: frozenset[str] | set[str]) -> str:
    return "+".join(sorted(families)) or BASE


def not_here(reason: str) -> None:
    print(f"not runnable here: {reason}", file=sys.stderr, flush=True)
    sys.exit(EXIT_NOT_HERE)


class Ranks:
    """The job's ranks (one without torchrun): agreeing on when to stop, so that every rank switches together."""

    def __init__(self, device_kind: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.host_group: Any = None
        self.dist: Any = None
        if self.world > 1:
            import torch.distributed as dist

            self.dist = dist
            dist.init_process_group("nccl" if device_kind == "cuda" else "gloo")
            self.host_group = dist.new_group(backend="gloo")

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def agree(self, stop: bool) -> bool:
        """True on every rank once any rank says stop."""
        if self.world == 1:
            return stop
        flag = torch.tensor([1 if stop else 0])
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MAX, group=self.host_group)
        return bool(flag.item())

    def close(self) -> None:
        if self.dist is not None:
            self.dist.destroy_process_group()


class GraphedStep:
    """A model step captured in a CUDA graph: static input and target, replayed with each batch copied in."""

    def __init__(self, graph: Any, x: torch.Tensor, y: torch.Tensor, loss: torch.Tensor, features: Any) -> None:
        self.graph, self.x, self.y, self.loss, self.features = graph, x, y, loss, features

    def fits(self, x: torch.Tensor, y: torch.Tensor) -> bool:
        return x.shape == self.x.shape and y.shape == self.y.shape

    def run(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, Any]:
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        return self.loss, self.features


class Job:
    """The model, its data and its step, each cause in place unless its family is in `ablated`."""

    def __init__(self, plan: Plan, device: torch.device, ranks: Ranks) -> None:
        self.plan = plan
        self.device = device
        self.cuda = device.type == "cuda"
        self.ranks = ranks
        self.ablated: frozenset[str] = frozenset()
        self.step_count = 0
        self.unsupported: dict[str, str] = {}
        torch.manual_seed(plan.seed)
        torch.backends.cuda.matmul.allow_tf32 = False
        self.model = parts.build_model(plan.model, plan.sizes).to(device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = self._optimizer()
        offload = plan.cause("cpu_optimizer")
        self.host_optimizer = (
            parts.HostOptimizer(self.params, offload.params["offloaded"], lr=1e-4) if offload is not None else None
        )
        self.shape = parts.sample_shape(plan.model, plan.sizes)
        self.sources: dict[str, Iterator[Any]] = {}
        self.batches = self._base_source()
        self.best = torch.tensor(float("inf"), device=device)
        self.running = torch.zeros((), device=device)
        self.log: collections.deque[str] = collections.deque(maxlen=1000)
        gc_cause = plan.cause("gc_churn")
        self.history: list[dict[str, Any]] = []
        self.kept = gc_cause.params["kept"] if gc_cause is not None else 1
        self.kept_on_host: torch.Tensor | None = None
        self.payloads = self._payloads()
        self.graph: Any = None
        if plan.cause("small_kernels") is not None:
            self._capture()
        self.launch_graph: GraphedStep | None = None
        if plan.cause("small_kernels") is None:
            self._capture_launches()

    # -- construction ----------------------------------------------------------------------------

    def _optimizer(self, capturable: bool = False) -> torch.optim.Optimizer:
        kind = self.plan.optimizer
        if kind == "sgd":
            return torch.optim.SGD(self.params, lr=1e-3, momentum=0.9)
        if kind == "adam":
            return torch.optim.Adam(self.params, lr=1e-4, capturable=capturable)
        return torch.optim.AdamW(self.params, lr=1e-4, weight_decay=0.01, capturable=capturable)

    def _base_source(self) -> Iterator[Any]:
        plan = self.plan
        loader_cause = plan.cause("loader_cpu") or plan.cause("few_workers")
        if loader_cause is not None:
            dataset = parts.CostlySamples(self.shape, loader_cause.params["rounds"])
            loader = parts.per_sample_loader(dataset, plan.batch, loader_cause.params["workers"], pin=self.cuda)
            return parts.forever(loader)
        pool = parts.random_batches(self.shape, plan.batch, 4, plan.seed)
        if plan.data == "gpu":
            on_device = [(x.to(self.device), y.to(self.device)) for x, y in pool]
            return itertools.cycle(on_device)
        if plan.data == "host_pool":
            return itertools.cycle([(x.pin_memory(), y.pin_memory()) for x, y in pool] if self.cuda else pool)
        return parts.forever(parts.ready_loader(pool, pin=self.cuda))

    def source_for(self, ablated: frozenset[str]) -> Iterator[Any]:
        """The batches for this variant: the loading removed (one cached batch) or a loader of many workers."""
        if "loader_cpu" in ablated or LOADING in ablated:
            if "cached" not in self.sources:
                self.sources["cached"] = itertools.repeat(next(self.batches))
            return self.sources["cached"]
        if "few_workers" in ablated:
            if "many_workers" not in self.sources:
                cause = self.plan.cause("few_workers")
                assert cause is not None
                dataset = parts.CostlySamples(self.shape, cause.params["rounds"])
                loader = parts.per_sample_loader(dataset, self.plan.batch, parts.many_workers(), pin=self.cuda)
                self.sources["many_workers"] = parts.forever(loader)
            return self.sources["many_workers"]
        return self.batches

    def _payloads(self) -> dict[bool, list[torch.Tensor]]:
        """The pageable_copy cause's pool of host payloads, pageable and (on CUDA) a pinned copy of it."""
        cause = self.plan.cause("pageable_copy")
        if cause is None:
            return {}
        numel = cause.params["payload_mb"] * 2**20 // 4
        pageable = [torch.full((numel,), float(i)) for i in range(2)]
        pinned = [t.pin_memory() for t in pageable] if self.cuda else pageable
        return {False: pageable, True: pinned}

    def _capture(self) -> None:
        """The small_kernels ablation: the model's step captured once in a CUDA graph (static input and target)."""
        if not self.cuda:
            self.unsupported["small_kernels"] = "CUDA graphs need CUDA"
            return
        x, y = next(self.batches)
        self.static_x = x.to(self.device).clone()
        self.static_y = y.to(self.device).clone()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.static_loss = self._model_step(self.static_x, self.static_y, None, graphed=True)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.static_loss = self._model_step(self.static_x, self.static_y, None, graphed=True)
            self.static_features = self.features
            self.graph = graph
        except RuntimeError as error:
            self.unsupported["small_kernels"] = f"graph capture failed: {str(error).splitlines()[0][:200]}"
            torch.cuda.synchronize()

    def _capture_launches(self) -> None:
        """The launches truth: the model step with every cause removed, captured once in a CUDA graph (its own
        capturable optimizer over the same parameters, the same math)."""
        if not self.cuda:
            self.unsupported[LAUNCHES] = "CUDA graphs need CUDA"
            return
        if self.ranks.world > 1:
            self.unsupported[LAUNCHES] = "the all-reduce is not captured"
            return
        if self.plan.cause("allocator_churn") is not None:  # the job died in empty_cache() beside the graph's pool
            self.unsupported[LAUNCHES] = "torch.cuda.empty_cache() beside a captured graph's memory pool"
            return
        saved_ablated, saved_optimizer, saved_features = self.ablated, self.optimizer, getattr(self, "features", None)
        self.ablated = frozenset(self.plan.families)
        self.optimizer = self._optimizer(capturable=True)
        try:
            x, y = next(self.batches)
            static_x, static_y = x.to(self.device).clone(), y.to(self.device).clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._model_step(static_x, static_y, None, graphed=True)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                loss = self._model_step(static_x, static_y, None, graphed=True)
            self.launch_graph = GraphedStep(graph, static_x, static_y, loss, self.features)
        except RuntimeError as error:
            self.unsupported[LAUNCHES] = f"graph capture failed: {str(error).splitlines()[0][:200]}"
            torch.cuda.synchronize()
        finally:
            self.ablated, self.optimizer = saved_ablated, saved_optimizer
            if saved_features is not None:
                self.features = saved_features

    def workers_of(self, ablated: frozenset[str]) -> int:
        """The DataLoader workers behind this variant's batches."""
        if "loader_cpu" in ablated or LOADING in ablated:
            return 0
        if "few_workers" in ablated:
            return parts.many_workers()
        cause = self.plan.cause("loader_cpu") or self.plan.cause("few_workers")
        if cause is not None:
            return int(cause.params["workers"])
        return 2 if self.plan.data == "loader" else 0

    # -- the step --------------------------------------------------------------------------------

    def active(self, family: str) -> bool:
        return family in self.plan.families and family not in self.ablated

    def bf16(self) -> bool:
        if self.plan.model == "tiny":
            return False
        return not self.active("fp32_math")

    def _model_step(
        self, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor | None, graphed: bool = False
    ) -> torch.Tensor:
        plan = self.plan
        if graphed or plan.zero_grad_set_to_none:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.zero_grad(set_to_none=False)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16(), cache_enabled=not graphed):
            logits, features = self.model(x)
        per_sample = F.cross_entropy(logits.float(), y, reduction="none")
        if weights is not None:
            per_sample = per_sample * weights
        syncs = plan.cause("syncs")
        if syncs is not None and "nonzero" in syncs.params["kinds"] and self.active("syncs"):
            keep = (y >= 0).nonzero().squeeze(1)  # the size of the result: a sync
            loss = per_sample[keep].mean()
        else:
            mask = (y >= 0).float()
            loss = (per_sample * mask).sum() / mask.sum()
        loss.backward()
        self.features = features
        if self.active("comm"):
            for param in self.params:
                if param.grad is not None:
                    self.ranks.dist.all_reduce(param.grad)
                    param.grad.div_(self.ranks.world)
        if plan.clip_grad:
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        if self.host_optimizer is not None and self.active("cpu_optimizer"):
            self.host_optimizer.step()
        else:
            self.optimizer.step()
        return loss.detach()

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        plan = self.plan
        x, y = batch
        host_math = plan.cause("train_cpu")
        weights = None
        if host_math is not None and host_math.params["style"] == "tensor_math":
            rounds = host_math.params["rounds"]
            if self.active("train_cpu"):
                x = parts.cpu_math(x.to("cpu"), rounds)
            x = x.to(self.device, non_blocking=True)
            if not self.active("train_cpu"):
                x = parts.cpu_math(x, rounds)
        else:
            x = x.to(self.device, non_blocking=True)
        if host_math is not None and host_math.params["style"] == "python_loop":
            terms = host_math.params["rounds"]
            if self.active("train_cpu"):
                labels = y.tolist()
                weights = torch.tensor([parts.weight_of(label, terms) for label in labels]).to(self.device)
        y = y.to(self.device, non_blocking=True)
        if host_math is not None and host_math.params["style"] == "python_loop" and weights is None:
            weights = parts.weights_of(y, host_math.params["rounds"])
        extra = None
        if self.payloads:
            pinned = not self.active("pageable_copy")
            payload = self.payloads[pinned][self.step_count % 2].to(self.device, non_blocking=pinned)
            extra = payload[:1].sum() * 0.0
        syncs = plan.cause("syncs")
        if syncs is not None and syncs.params["tiny_ops"]:
            scale = x.reshape(-1)[:64].float()
            for _ in range(syncs.params["tiny_ops"]):  # per-step input statistics, op by op
                scale = scale * 0.999 + 0.001
            extra = scale.mean() * 0.0 if extra is None else extra + scale.mean() * 0.0
        if self.graph is not None and not self.active("small_kernels"):
            self.static_x.copy_(x)
            self.static_y.copy_(y)
            self.graph.replay()
            loss = self.static_loss
            self.features = self.static_features
        elif self.launch_graph is not None and LAUNCHES in self.ablated and self.launch_graph.fits(x, y):
            loss, self.features = self.launch_graph.run(x, y)
        else:
            loss = self._model_step(x, y, weights)
        if extra is not None:
            loss = loss + extra.detach()
        if syncs is not None:
            self._log(loss, syncs.params["kinds"])
        d2h = plan.cause("d2h")
        if d2h is not None:
            repeat = -(-d2h.params["copy_mb"] * 2**20 // (4 * self.features.numel()))
            snapshot = self.features.detach().float().repeat(1, repeat)
            if self.active("d2h"):
                self.kept_on_host = snapshot.cpu()  # kept for an epoch-end metric
        gc_cause = plan.cause("gc_churn")
        if gc_cause is not None:
            step = self.step_count
            for i in range(gc_cause.params["records"]):
                self.history.append({"step": step, "sample": i, "tags": [i % 7, step % 3], "seen": [step]})
            if len(self.history) > self.kept:
                # The older half dropped at once: a full deque(maxlen) frees one record per record made, which keeps
                # the collector's allocation count flat, so it never ran once the history was full.
                del self.history[: len(self.history) // 2]
        churn = plan.cause("allocator_churn")
        if churn is not None and self.active("allocator_churn") and self.step_count % churn.params["every"] == 0:
            torch.cuda.empty_cache()  # a no-op where CUDA is not initialised
        self.step_count += 1

    def _log(self, loss: torch.Tensor, kinds: list[str]) -> None:
        step = self.step_count
        if self.active("syncs"):
            if "item" in kinds:
                self.running += loss.item()
            if "if_bool" in kinds and loss < self.best:
                self.best = loss.detach()
            if "fstring" in kinds:
                self.log.append(f"step {step} loss {loss:.4f}")
            return
        self.running += loss
        self.best = torch.minimum(self.best, loss)
        if step % LOG_EVERY == 0:
            self.log.append(f"step {step} loss {loss:.4f} best {self.best:.4f} sum {self.running.item():.1f}")

    # -- variants --------------------------------------------------------------------------------

    def set_variant(self, ablated: frozenset[str]) -> None:
        if "gc_churn" in ablated and "gc_churn" not in self.ablated:
            gc.freeze()
            gc.disable()
        elif "gc_churn" not in ablated and "gc_churn" in self.ablated:
            gc.unfreeze()
            gc.enable()
        self.ablated = ablated

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def run_loop(job: Job, batches: Iterator[Any], keep_going: Callable[[], bool]) -> None:
    """The job's loop, in the style its plan drew."""
    if job.plan.loop == "for_loader":
        for batch in batches:
            job.train_step(batch)
            if not keep_going():
                return
    elif job.plan.loop == "while_next":
        while True:
            batch = next(batches)
            job.train_step(batch)
            if not keep_going():
                return
    else:
        Trainer(job).fit(batches, keep_going)


class Trainer:
    """A Trainer-like driver: fit() calls train_step() batch after batch."""

    def __init__(self, job: Job) -> None:
        self.job = job

    def train_step(self, batch: Any) -> None:
        self.job.train_step(batch)

    def fit(self, batches: Iterator[Any], keep_going: Callable[[], bool]) -> None:
        for batch in batches:
            self.train_step(batch)
            if not keep_going():
                break


class Phases:
    """Runs the job through its phases and times its variants."""

    def __init__(self, job: Job, args: argparse.Namespace) -> None:
        self.job = job
        self.args = args
        self.control = Path(args.control) if args.control else None

    def say(self, line: str) -> None:
        if self.job.ranks.leader:
            print(line, flush=True)

    def train_until(self, deadline: float, min_steps: int = 1, released: Callable[[], bool] | None = None) -> int:
        """Train until the deadline (or, with `released`, until it says so, the deadline as a cap); the step count."""
        start = self.job.step_count
        ranks = self.job.ranks

        def keep_going() -> bool:
            stop = self.job.step_count - start >= min_steps and (
                time.monotonic() >= deadline or (released is not None and released())
            )
            return not ranks.agree(stop)

        run_loop(self.job, self.job.source_for(self.job.ablated), keep_going)
        return self.job.step_count - start

    def phase(self, name: str, seconds: float) -> None:
        self.say(f"PHASE {name} pid={os.getpid()} seconds={seconds:g}")
        if seconds <= 0:
            return
        if self.control is None or not name.startswith("diagnose-"):
            self.train_until(time.monotonic() + seconds)
            return
        done = self.control / f"{name}.done"
        self.train_until(time.monotonic() + self.args.phase_cap, released=done.exists)

    def window(self, ablated: frozenset[str]) -> float:
        """One timed window of a variant: samples/s between two synchronizes, after it settles."""
        job = self.job
        job.set_variant(ablated)
        settle_steps = 3 + 2 * job.workers_of(ablated)  # the batches its workers made while it was idle
        self.train_until(time.monotonic() + self.args.settle, min_steps=settle_steps)
        job.sync()
        started = time.monotonic()
        steps = self.train_until(started + self.args.window, min_steps=MIN_WINDOW_STEPS)
        job.sync()
        return steps * job.plan.batch / (time.monotonic() - started)

    def variants(self) -> list[frozenset[str]]:
        fixable = [f for f in self.job.plan.families if f not in self.job.unsupported and f in FAMILIES]
        if self.job.ranks.world == 1 and "comm" in fixable:
            fixable.remove("comm")
        out = [frozenset()] + [frozenset({f}) for f in fixable]
        if len(fixable) > 1:
            out.append(frozenset(fixable))
        if self.job.launch_graph is not None:
            out.append(frozenset(fixable) | {LAUNCHES})
        if measures_loading(self.job.plan):
            out.append(frozenset({LOADING}))
        return out

    def truth(self) -> dict[str, Any]:
        self.say("PHASE truth")
        variants = self.variants()
        rates: dict[str, list[float]] = {variant_key(v): [] for v in variants}
        for round_ in range(self.args.rounds):
            for ablated in variants if round_ % 2 == 0 else variants[::-1]:
                rates[variant_key(ablated)].append(round(self.window(ablated | self.fixed), 3))
        self.job.set_variant(self.fixed)
        medians = {key: statistics.median(values) for key, values in rates.items() if values}
        base = medians.get(BASE)
        truth = {key: round(1.0 - base / rate, 4) for key, rate in medians.items() if key != BASE and base and rate}
        launched = [v for v in variants if LAUNCHES in v]
        if launched and base:
            rest, graphed = medians.get(variant_key(launched[0] - {LAUNCHES})), medians.get(variant_key(launched[0]))
            if rest and graphed:
                truth[LAUNCHES] = round(base * (1.0 / rest - 1.0 / graphed), 4)
        return {"rates": rates, "median_samples_per_s": medians, "truth": truth}

    @property
    def fixed(self) -> frozenset[str]:
        return frozenset(self.args.ablate)


def pick_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        not_here("--device cuda: no CUDA device here")
    return torch.device(requested)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--tiny", action="store_true", help="the CPU check's sizes (the default on the CPU)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up (default 3)")
    parser.add_argument("--hook-phase", type=float, default=8.0, help="seconds for the hooked diagnosis (default 8)")
    parser.add_argument("--pyspy-phase", type=float, default=8.0, help="seconds for py-spy's (0: none; default 8)")
    parser.add_argument("--phase-cap", type=float, default=180.0, help="with --control: a phase's longest wait")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per timed window (default 1)")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds left out before each window")
    parser.add_argument("--rounds", type=int, default=3, help="windows per variant (default 3)")
    parser.add_argument("--control", default=None, help="a folder where the runner ends phases (NAME.done)")
    parser.add_argument("--ablate", action="append", default=[], choices=sorted(FAMILIES))
    parser.add_argument("--plan", action="store_true", help="print the plan as JSON and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    device = pick_device(args.device)
    plan = make_plan(args.seed, tiny=args.tiny or device.type == "cpu")
    if args.plan:
        print(json.dumps(plan.to_dict()))
        return 0
    if plan.ranks > int(os.environ.get("WORLD_SIZE", "1")):
        not_here(f"seed {args.seed} has the comm cause: run it under torchrun with {plan.ranks} ranks")
    torch.set_num_threads(min(4, parts.cpu_count()))
    ranks = Ranks(device.type)
    if device.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            not_here(f"rank {local} has no GPU of its own")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    job = Job(plan, device, ranks)
    phases = Phases(job, args)
    phases.say("PLAN " + json.dumps(plan.to_dict()))
    job.set_variant(phases.fixed)
    phases.phase("warmup", args.warmup)
    phases.phase("diagnose-hook", args.hook_phase)
    phases.phase("diagnose-pyspy", args.pyspy_phase)
    result = phases.truth()
    line = {
        "generated": plan.seed,
        "families": plan.families,
        "categories": {cause.family: cause.category for cause in plan.causes},
        "fixed": sorted(phases.fixed),
        **result,
        "unsupported": job.unsupported,
        "steps": job.step_count,
        "device": str(device),
        "ranks": ranks.world,
        "plan": plan.to_dict(),
    }
    phases.say(json.dumps(line))
    ranks.close()
    os._exit(0)  # the loaders' workers and the hook's threads need no orderly end


if __name__ == "__main__":
    sys.exit(main())
