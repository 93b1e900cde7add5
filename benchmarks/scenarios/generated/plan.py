"""A generated job's plan from its seed: the model, the loop's style and the causes with their magnitudes (no torch)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

TUNE_SEEDS = range(0, 100)
"""Seeds to tune the advisor on (benchmarks/scenarios/README.md): the held-out set is never looked at while tuning."""
HELDOUT_SEEDS = range(1000, 2000)
SEED_SETS = {"tune": TUNE_SEEDS, "heldout": HELDOUT_SEEDS}

HEALTHY = "healthy"
LAUNCHES = "launches"
"""Not a drawn cause but a truth measured on every one-GPU CUDA job: what is left once every cause is removed, its
model step replayed from a CUDA graph. The speed-up is the base loop's own launch overhead (a small model at a few
hundred steps/s is launch-bound with no cause drawn), as a share of the baseline's time per sample."""
LAUNCHES_CATEGORY = "launch_bound"
LOADING = "loading"
"""Not a drawn cause either: on a job whose batches come from its base DataLoader (two workers handing over ready
batches, pinned on CUDA) with no loader cause drawn, the speed-up with one cached batch in its place: the base
loader's own cost, which no drawn cause's ablation measures (held-out 1056 and 1062 waited 28-58% of the step on it
with no cause drawn, and the truth called them healthy)."""
LOADING_CATEGORY = "input_bound"
LOADER_FAMILIES = ("loader_cpu", "few_workers")


@dataclass(frozen=True)
class Family:
    """One kind of cause: the category the advisor should name for it and what its ablation switch does."""

    name: str
    category: str
    ablation: str
    needs_cpu_data: bool = False
    """The batches must start on the host (a loader or a pool of host tensors)."""
    model: str | None = None
    """The model the cause needs (it sizes the model itself), or None for any."""


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("loader_cpu", "input_bound", "one cached batch reused: the loading removed", needs_cpu_data=True),
        Family("few_workers", "input_bound", "num_workers = the cores but two (persistent)", needs_cpu_data=True),
        Family("train_cpu", "cpu_bound", "the same math on the GPU after the copy", needs_cpu_data=True),
        Family("gc_churn", "gc_bound", "the records kept, the collector frozen and disabled"),
        Family("syncs", "host_sync", "the values kept on the GPU, read every 100 steps"),
        Family("small_kernels", "launch_bound", "the step captured in a CUDA graph (CUDA only)", model="tiny"),
        Family("pageable_copy", "transfer_bound", "the payload pool pinned, copied non_blocking"),
        Family("d2h", "transfer_bound", "no copy to the host"),
        Family("cpu_optimizer", "cpu_optimizer", "the optimizer on the GPU"),
        Family("allocator_churn", "allocator_churn", "no torch.cuda.empty_cache()"),
        Family("fp32_math", "low_precision", "bf16 autocast (not math neutral)", model="wide"),
        Family("comm", "comm_bound", "no all-reduce (2 ranks under torchrun)"),
    )
}

EXCLUSIVE = (
    {"loader_cpu", "few_workers"},  # both are the loader
    {"pageable_copy", "d2h"},  # one cause per category
    {"small_kernels", "fp32_math"},  # each sizes the model its own way
    {"small_kernels", "cpu_optimizer"},  # the optimizer runs inside the graph
    {"small_kernels", "allocator_churn"},
    {"small_kernels", "comm"},
    {"comm", "cpu_optimizer"},
)
CAUSE_COUNT_WEIGHTS = (0.2, 0.45, 0.25, 0.1)
"""Chance of 0, 1, 2 and 3 causes."""
FAMILY_WEIGHTS = {name: 1.0 for name in FAMILIES} | {"comm": 0.3}
"""comm needs 2 GPUs (skipped on fewer), so it is drawn less often."""

MODELS = ("mlp", "cnn", "transformer")
LOOPS = ("for_loader", "while_next", "trainer_class")
ASSUMED_TFLOPS = 300.0
"""A rough bf16 rate of an H200 on these small models (matmul peak 989), only to keep a step's GPU time in range."""
GPU_MS_RANGE = (2.0, 40.0)
EFFICIENCY = {"cnn": 0.35}
"""Small convolutions run further below the peak than matmuls (a guess, refined by the GPU runs' own step times)."""


@dataclass(frozen=True)
class Cause:
    family: str
    category: str
    magnitude: float
    """0..1: how strong the cause was drawn (its parameters follow from it)."""
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    seed: int
    tiny: bool
    model: str
    sizes: Mapping[str, int]
    batch: int
    loop: str
    optimizer: str
    zero_grad_set_to_none: bool
    clip_grad: bool
    data: str
    """gpu (a pool of batches on the device), host_pool (pinned host batches), loader (a DataLoader)."""
    causes: tuple[Cause, ...]
    ranks: int = 1
    est_gpu_ms: float | None = None

    @property
    def families(self) -> list[str]:
        return [cause.family for cause in self.causes]

    def cause(self, family: str) -> Cause | None:
        return next((cause for cause in self.causes if cause.family == family), None)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["causes"] = [asdict(cause) | {"params": dict(cause.params)} for cause in self.causes]
        out["sizes"] = dict(self.sizes)
        return out


def draw_causes(rng: random.Random) -> list[str]:
    count = rng.choices(range(len(CAUSE_COUNT_WEIGHTS)), weights=CAUSE_COUNT_WEIGHTS)[0]
    chosen: list[str] = []
    while len(chosen) < count:
        left = [
            name
            for name in FAMILIES
            if name not in chosen and not any(name in group and group & set(chosen) for group in EXCLUSIVE)
        ]
        if not left:
            break
        chosen.append(rng.choices(left, weights=[FAMILY_WEIGHTS[name] for name in left])[0])
    return chosen


def model_flops(model: str, sizes: Mapping[str, int], batch: int) -> float:
    """Training FLOPs of one step (3x the forward's multiply-adds x 2), roughly."""
    if model in ("mlp", "wide", "tiny"):
        width, depth, ratio = sizes["width"], sizes["depth"], sizes.get("ratio", 1)
        return 6.0 * batch * depth * 2 * width * width * ratio
    if model == "cnn":
        c, s = sizes["channels"], sizes["image"]
        per_image = sum(9 * cin * cout * (s // 2 ** (i + 1)) ** 2 for i, (cin, cout) in enumerate(_cnn_widths(c)))
        return 6.0 * batch * per_image
    d, t, depth = sizes["d_model"], sizes["seq"], sizes["depth"]
    return 6.0 * batch * depth * (12 * t * d * d + 2 * t * t * d)


def estimated_gpu_ms(kind: str, sizes: Mapping[str, int], batch: int) -> float:
    return model_flops(kind, sizes, batch) / (ASSUMED_TFLOPS * 1e12 * EFFICIENCY.get(kind, 1.0)) * 1e3


def _cnn_widths(channels: int) -> list[tuple[int, int]]:
    return [(3, channels), (channels, channels * 2), (channels * 2, channels * 4), (channels * 4, channels * 4)]


def draw_model(rng: random.Random, kind: str, tiny: bool, batch_cap: int | None) -> tuple[dict[str, int], int]:
    """Sizes and batch, resampled until the step's estimated GPU time is in GPU_MS_RANGE (the same draws with
    `tiny`, which then shrinks them to the CPU check's sizes)."""
    sizes, batch = draw_sizes(rng, kind, batch_cap)
    for _ in range(200):
        ms = estimated_gpu_ms(kind, sizes, batch)
        if kind == "tiny" or batch_cap is not None or GPU_MS_RANGE[0] <= ms <= GPU_MS_RANGE[1]:
            break
        sizes, batch = draw_sizes(rng, kind, batch_cap)
    if tiny:
        return shrink(kind, sizes), min(batch, 16)
    return sizes, batch


def draw_sizes(rng: random.Random, kind: str, batch_cap: int | None) -> tuple[dict[str, int], int]:
    if kind == "tiny":  # many small layers, a tiny batch: microsecond kernels
        return {"width": rng.choice((32, 64, 128)), "depth": rng.randint(24, 64), "ratio": 1}, rng.choice((2, 4, 8, 16))
    if kind == "wide":  # big fp32 matmuls
        sizes = {"width": rng.choice((2048, 4096)), "depth": rng.randint(2, 4), "ratio": 1}
        batch = rng.choice((2048, 4096, 8192))
    elif kind == "mlp":
        sizes = {"width": rng.choice((512, 1024, 2048)), "depth": rng.randint(2, 6), "ratio": 4}
        batch = rng.choice((256, 512, 1024, 2048, 4096, 8192))
    elif kind == "cnn":
        sizes = {"channels": rng.choice((32, 64, 96)), "image": rng.choice((32, 64, 96))}
        batch = rng.choice((64, 128, 256, 512))
    else:
        d_model = rng.choice((256, 512, 768))
        sizes = {"d_model": d_model, "seq": rng.choice((128, 256, 512)), "depth": rng.randint(2, 6)}
        sizes["heads"] = d_model // 64
        batch = rng.choice((8, 16, 32, 64))
    return sizes, batch if batch_cap is None else min(batch, batch_cap)


def shrink(kind: str, sizes: Mapping[str, int]) -> dict[str, int]:
    """The CPU check's sizes: the same shape of model, small enough for a few ms a step on one core."""
    out = dict(sizes)
    if kind in ("mlp", "wide"):
        out.update(width=64, depth=min(sizes["depth"], 3))
    elif kind == "tiny":
        out.update(depth=min(sizes["depth"], 24))
    elif kind == "cnn":
        out.update(channels=8, image=32)
    else:
        out.update(d_model=64, seq=32, depth=2, heads=2)
    return out


def draw_cause(rng: random.Random, family: str, tiny: bool) -> Cause:
    """The cause's parameters from a magnitude drawn uniformly in 0..1 (log-spaced where a cost spans decades)."""
    m = rng.random()
    params: dict[str, Any]
    if family == "loader_cpu":
        params = {"workers": rng.choice((1, 2, 3, 4)), "rounds": round(2 + 22 * m)}
    elif family == "few_workers":
        params = {"workers": rng.choice((0, 1)), "rounds": round(1 + 7 * m)}
    elif family == "train_cpu":
        style = rng.choice(("tensor_math", "python_loop"))
        params = {"style": style, "rounds": round(1 + 5 * m) if style == "tensor_math" else round(5 + 195 * m)}
    elif family == "gc_churn":
        params = {"records": round(2000 * 100**m if not tiny else 200 + 1800 * m)}
        params["kept"] = 500_000 if not tiny else 50_000
    elif family == "syncs":
        kinds = rng.sample(("item", "if_bool", "fstring", "nonzero"), rng.randint(1, 3))
        params = {"kinds": sorted(kinds), "tiny_ops": round(20 + 280 * m)}
    elif family == "small_kernels":
        params = {"graph_warmup": 3}
        m = 0.5
    elif family == "pageable_copy":
        params = {"payload_mb": round(16 * 32**m) if not tiny else 4}
    elif family == "d2h":
        params = {"copy_mb": round(8 * 32**m) if not tiny else 1}
    elif family == "cpu_optimizer":
        params = {"offloaded": round(0.1 + 0.9 * m, 2)}
    elif family == "allocator_churn":
        params = {"every": rng.choice((1, 1, 2, 4))}
        m = 1.0 / params["every"]
    elif family == "fp32_math":
        params = {}
        m = 0.5
    else:  # comm
        params = {"ranks": 2}
    return Cause(family, FAMILIES[family].category, round(m, 3), params)


def make_plan(seed: int, tiny: bool = False) -> Plan:
    """The job of `seed`: the same plan on every machine (`tiny`: the CPU check's sizes, the same draws)."""
    rng = random.Random(seed)
    families = draw_causes(rng)
    needs = {FAMILIES[name].model for name in families} - {None}
    kind = needs.pop() if needs else rng.choice(MODELS)
    per_sample_loader = bool({"loader_cpu", "few_workers"} & set(families))
    batch_cap = (32 if kind == "transformer" else 256) if per_sample_loader else None
    sizes, batch = draw_model(rng, kind, tiny, batch_cap)
    causes = tuple(draw_cause(rng, name, tiny) for name in families)
    if per_sample_loader:
        data = "loader"
    elif any(FAMILIES[name].needs_cpu_data for name in families):
        data = rng.choice(("host_pool", "loader"))
    else:
        data = rng.choice(("gpu", "gpu", "loader"))
    optimizer = "sgd" if kind == "tiny" else rng.choice(("adamw", "adam", "sgd"))
    plan = Plan(
        seed=seed,
        tiny=tiny,
        model=kind,
        sizes=sizes,
        batch=batch,
        loop=rng.choice(LOOPS),
        optimizer=optimizer,
        zero_grad_set_to_none=rng.random() < 0.7,
        clip_grad=kind != "tiny" and rng.random() < 0.4,
        data=data,
        causes=causes,
        ranks=2 if "comm" in families else 1,
        est_gpu_ms=round(estimated_gpu_ms(kind, sizes, batch), 3),
    )
    return plan


def measured_causes(truth: Mapping[str, float | None], plan: Plan) -> list[tuple[str, str]]:
    """(family, category) of each cause the truth holds, the base loop's launches and base loader included where they
    were measured."""
    out = [(cause.family, cause.category) for cause in plan.causes]
    if LAUNCHES in truth and LAUNCHES not in plan.families:
        out.append((LAUNCHES, LAUNCHES_CATEGORY))
    if LOADING in truth and LOADING not in plan.families:
        out.append((LOADING, LOADING_CATEGORY))
    return out


def measures_loading(plan: Plan) -> bool:
    """Whether the job's truth times its base DataLoader against a cached batch (LOADING)."""
    return plan.data == "loader" and not any(family in plan.families for family in LOADER_FAMILIES)


def expected_category(truth: Mapping[str, float | None], plan: Plan, bar: float) -> str:
    """The category of the cause whose ablation recovers the most, healthy when none recovers `bar` or more."""
    best, best_share = HEALTHY, bar
    for family, category in measured_causes(truth, plan):
        share = truth.get(family)
        if share is not None and share >= best_share:
            best, best_share = category, share
    return best


def either_of(truth: Mapping[str, float | None], plan: Plan, bar: float) -> tuple[str, ...]:
    """Where no cause alone gives back `bar` but removing all of them together does, each is enough to bound the job
    (it waits on whichever is slower): the categories of those causes, the one that gave back most alone first.
    Empty otherwise."""
    if expected_category(truth, plan, bar) != HEALTHY:
        return ()
    alone = {family: truth[family] for family in plan.families if truth.get(family) is not None}
    together = truth.get("+".join(sorted(alone)))
    if len(alone) < 2 or together is None or together < bar:
        return ()
    order = sorted(alone, key=lambda family: -(alone[family] or 0.0))
    categories = {cause.family: cause.category for cause in plan.causes}
    return tuple(dict.fromkeys(categories[family] for family in order))
